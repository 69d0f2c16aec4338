//! The printer behind the [`Story`](super::timeline::Story): holds steps back for the
//! reorder window, prints them in time order as aligned lines (elapsed cluster time,
//! node, who, what), once per scenario for repeating ones, and nothing outside a
//! scenario.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

use super::style::Style;
use super::timeline::{Fact, Msg, REORDER_WINDOW, RequestChange, Step};

/// The scenario being printed.
struct Scene {
    t0: SystemTime,
    printed_once: BTreeSet<String>,
}

/// Owns the output; runs as one task fed by the story's channel.
pub(super) struct Printer {
    out: Box<dyn Write + Send>,
    style: Style,
    speed: f64,
    buffer: Vec<Step>,
    scene: Option<Scene>,
}

impl Printer {
    pub(super) fn new(out: Box<dyn Write + Send>, style: Style, speed: f64) -> Self {
        Self {
            out,
            style,
            speed,
            buffer: Vec::new(),
            scene: None,
        }
    }

    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    None => break,
                    Some(Msg::Step(step)) => self.buffer.push(*step),
                    Some(Msg::Line(text)) => {
                        self.flush(crate::clock::now());
                        self.write(&text);
                    }
                    Some(Msg::Begin(t0)) => {
                        self.flush(crate::clock::now());
                        self.scene = Some(Scene { t0, printed_once: BTreeSet::new() });
                    }
                    Some(Msg::End(ack)) => {
                        self.flush(crate::clock::now());
                        self.scene = None;
                        let _ = ack.send(());
                    }
                },
                _ = tick.tick() => {
                    let due = crate::clock::now()
                        .checked_sub(REORDER_WINDOW)
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    self.flush(due);
                }
            }
        }
        self.flush(crate::clock::now());
    }

    /// Prints (or drops, outside a scenario) the held steps that happened up to `until`.
    fn flush(&mut self, until: SystemTime) {
        self.buffer.sort_by_key(|s| s.at);
        causal_order(&mut self.buffer);
        let later = self.buffer.iter().position(|s| s.at > until);
        let due: Vec<Step> = match later {
            Some(i) => self.buffer.drain(..i).collect(),
            None => self.buffer.drain(..).collect(),
        };
        for step in due {
            if let Some(line) = self.format(&step) {
                self.write(&line);
            }
        }
    }

    fn format(&mut self, step: &Step) -> Option<String> {
        let scene = self.scene.as_mut()?;
        let since = step.at.duration_since(scene.t0).ok()?;
        if let Some(key) = &step.once
            && !scene.printed_once.insert(format!("{}|{key}", step.node))
        {
            return None;
        }
        let style = self.style;
        let elapsed = format!("+{:.1}s", since.as_secs_f64() * self.speed);
        let actor = step
            .actor
            .paint(style, &format!("{:<13}", step.actor.label()));
        let text = if step.warning {
            style.yellow(&step.text)
        } else {
            step.text.clone()
        };
        Some(format!(
            "  {}  {:<10} {}  {}",
            style.dim(&format!("{elapsed:>8}")),
            step.node,
            actor,
            text
        ))
    }

    fn write(&mut self, line: &str) {
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
    }
}

/// The BMC feed polls, so a Reset is stamped a few milliseconds after it arrived:
/// a reading nodefence took just after its command, or the request status it wrote,
/// could sort first. A Reset moves ahead of the other nodefence lines about its node
/// stamped less than [`CAUSAL_SLACK`] before it (but never ahead of the decision that
/// sent it).
fn causal_order(steps: &mut [Step]) {
    for i in 1..steps.len() {
        let mut j = i;
        while j > 0 {
            let (a, b) = (&steps[j - 1], &steps[j]);
            let close = b.at.duration_since(a.at).unwrap_or_default() < CAUSAL_SLACK;
            let reading = matches!(&a.fact, Fact::Nodefence { reason }
                if reason != "PoweringOff" && reason != "PoweringOn")
                || matches!(
                    &a.fact,
                    Fact::Request {
                        change: RequestChange::Conditions(_),
                        ..
                    }
                );
            if close && a.node == b.node && reading && matches!(b.fact, Fact::Reset { .. }) {
                steps.swap(j - 1, j);
                j -= 1;
            } else {
                break;
            }
        }
    }
}

/// How far back a Reset may move (see [`causal_order`]).
const CAUSAL_SLACK: Duration = Duration::from_millis(20);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::timeline::Actor;

    #[test]
    fn a_reset_comes_before_the_reading_that_followed_it() {
        let t = crate::clock::now();
        let nf = |ms: u64, reason: &str| {
            Step::new(
                t + Duration::from_millis(ms),
                "w",
                Actor::Nodefence,
                Fact::Nodefence {
                    reason: reason.into(),
                },
                reason.into(),
            )
        };
        let reset = Step::new(
            t + Duration::from_millis(5),
            "w",
            Actor::Bmc,
            Fact::Reset {
                reset_type: "ForceOff".into(),
            },
            "reset".into(),
        );
        let status = Step::new(
            t + Duration::from_millis(3),
            "w",
            Actor::Nodefence,
            Fact::Request {
                name: "nodefence/w".into(),
                change: RequestChange::Conditions(vec![(
                    "Processing".into(),
                    "True".into(),
                    "ConfirmingOff".into(),
                )]),
            },
            "status".into(),
        );
        let mut steps = vec![nf(0, "PoweringOff"), nf(2, "FenceBlocked"), status, reset];
        causal_order(&mut steps);
        let texts: Vec<&str> = steps.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["PoweringOff", "reset", "FenceBlocked", "status"]);
    }
}
