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
    /// How long steps are held for earlier ones still on their way: [`REORDER_WINDOW`],
    /// widened (up to [`MAX_REORDER_WINDOW`]) to twice the latest arrival seen, so
    /// that a slow machine still prints in time order.
    window: Duration,
}

impl Printer {
    pub(super) fn new(out: Box<dyn Write + Send>, style: Style, speed: f64) -> Self {
        Self {
            out,
            style,
            speed,
            buffer: Vec::new(),
            scene: None,
            window: REORDER_WINDOW,
        }
    }

    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    None => break,
                    Some(Msg::Step(step)) => self.hold(*step, crate::clock::now()),
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
                        .checked_sub(self.window)
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    self.flush(due);
                }
            }
        }
        self.flush(crate::clock::now());
    }

    /// Holds a step that arrived at `now`, widening the window if it came late.
    fn hold(&mut self, step: Step, now: SystemTime) {
        let late = now.duration_since(step.at).unwrap_or_default();
        self.window = self.window.max((late * 2).min(MAX_REORDER_WINDOW));
        self.buffer.push(step);
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
        let text = step.text_since(scene.t0, self.speed);
        let text = if step.warning {
            style.yellow(&text)
        } else {
            text
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

/// Two kinds of step are stamped later than what they tell happened, so a step
/// they caused can sort first:
///
/// - the BMC feed polls, so a Reset is stamped a few milliseconds after it arrived: a
///   reading nodefence took just after its command, or the request status it wrote,
///   could sort first;
/// - nodefence writes its `Released` Event ("out-of-service taint added") once the
///   whole release is done, after the `PodsForceDeleted` Event of the pods it deleted
///   once the taint was on.
///
/// Such a step moves ahead of the steps about its node it caused, stamped less than
/// [`CAUSAL_SLACK`] before it (a Reset never ahead of the decision that sent it), and
/// takes the earliest of their times: it happened no later than they did, and the
/// times printed never go backwards.
fn causal_order(steps: &mut [Step]) {
    for i in 1..steps.len() {
        let mut j = i;
        while j > 0 {
            let (a, b) = (&steps[j - 1], &steps[j]);
            let gap = b.at.duration_since(a.at).unwrap_or_default();
            let reading = matches!(&a.fact, Fact::Nodefence { reason }
                if reason != "PoweringOff" && reason != "PoweringOn")
                || matches!(
                    &a.fact,
                    Fact::Request {
                        change: RequestChange::Conditions(_),
                        ..
                    }
                );
            let reset_after_reading =
                reading && matches!(b.fact, Fact::Reset { .. }) && gap < CAUSAL_SLACK;
            let release_after_its_deletions = a.is_nodefence("PodsForceDeleted")
                && b.is_nodefence("Released")
                && gap < RELEASE_SLACK;
            if a.node == b.node && (reset_after_reading || release_after_its_deletions) {
                let earlier = a.at;
                steps.swap(j - 1, j);
                steps[j - 1].at = earlier;
                j -= 1;
            } else {
                break;
            }
        }
    }
}

/// How far back a Reset may move (see [`causal_order`]).
const CAUSAL_SLACK: Duration = Duration::from_millis(20);

/// How far back a `Released` may move ahead of the `PodsForceDeleted` written during
/// that release (see [`causal_order`]); under [`REORDER_WINDOW`], which holds both.
const RELEASE_SLACK: Duration = Duration::from_millis(150);

/// The most the reorder window grows to when steps arrive late (see [`Printer::run`]).
const MAX_REORDER_WINDOW: Duration = Duration::from_secs(1);

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
        assert!(steps.windows(2).all(|w| w[0].at <= w[1].at), "{steps:?}");
        // The taint is added before the pods are force-deleted, though its Event is
        // written after theirs.
        let mut steps = vec![
            nf(0, "ConfirmedOff"),
            nf(50, "PodsForceDeleted"),
            nf(90, "Released"),
        ];
        causal_order(&mut steps);
        let texts: Vec<&str> = steps.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["ConfirmedOff", "Released", "PodsForceDeleted"]);
        assert!(steps.windows(2).all(|w| w[0].at <= w[1].at), "{steps:?}");
    }

    #[derive(Clone, Default)]
    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Steps from several feeds, each stamped when it happened and arriving late and
    /// out of order, print in order of their times, none lost.
    #[test]
    fn late_steps_out_of_order_print_in_time_order() {
        let sink = Sink::default();
        let mut printer = Printer::new(Box::new(sink.clone()), Style::new(false), 10.0);
        let t = crate::clock::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        let step =
            |n: u64, text: &str| Step::new(ms(n), "w", Actor::Kubelet, Fact::You, text.to_string());
        printer.scene = Some(Scene {
            t0: t,
            printed_once: BTreeSet::new(),
        });
        // A tick every 50 ms flushes what is older than the window.
        let tick = |p: &mut Printer, now: u64| {
            let due = ms(now)
                .checked_sub(p.window)
                .unwrap_or(SystemTime::UNIX_EPOCH);
            p.flush(due);
        };
        printer.hold(step(0, "a"), ms(1));
        // One arrives 300 ms after it happened: the window widens to 600 ms (and to
        // 900 ms with "c"); with the first 200 ms, "d" would print before "c".
        printer.hold(step(40, "b"), ms(340));
        tick(&mut printer, 350);
        printer.hold(step(700, "e"), ms(705));
        tick(&mut printer, 750);
        printer.hold(step(500, "d"), ms(800));
        tick(&mut printer, 850);
        printer.hold(step(450, "c"), ms(900));
        for now in (900..=1500).step_by(50) {
            tick(&mut printer, now);
        }
        printer.flush(ms(10_000));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let order: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        assert_eq!(order, ["a", "b", "c", "d", "e"], "{text}");
        assert_eq!(printer.window, Duration::from_millis(900));
    }
}
