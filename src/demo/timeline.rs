//! The story as the terminal shows it: every step from every source (the simulated
//! control plane, nodefence's Events, the BMC, the person running the demo), one
//! aligned line each, in time order.
//!
//! Steps arrive from several tasks, each a few milliseconds late, so the printer (see
//! `printer`) holds them for [`REORDER_WINDOW`] (longer once steps arrive later than
//! that) and prints them sorted by when they happened. Each is stamped when it
//! happened, not when it arrived (the simulation stamps a change before the write
//! others react to); a step stamped after steps it caused moves ahead of them. Times
//! a text refers to are [`Mark`]s, printed on the scenario's clock like the steps. Lines are printed only inside a scenario (between [`Story::begin`] and
//! [`Story::end`]), with the time since the scenario's first action. Every step is
//! also kept, printed or not, for the scenarios' checks and the summary.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nodefence_mocks::kube::sim::SimEventKind;
use nodefence_mocks::redfish::MockPower;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::printer::Printer;
use super::style::Style;

/// How long a step waits for earlier ones that are still on their way.
pub const REORDER_WINDOW: Duration = Duration::from_millis(200);

/// Who did it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// The person running the demo (the power plug, the network cable).
    You,
    Kubelet,
    ControlPlane,
    Nodefence,
    Bmc,
    /// The mock vCenter, when the workers are VMs.
    Vcenter,
    /// The NodeHealthCheck operator (its stand-in).
    Nhc,
    /// A machine's hardware watchdog (simulated, `rack-power`).
    Watchdog,
}

impl Actor {
    pub fn label(self) -> &'static str {
        match self {
            Actor::You => "you",
            Actor::Kubelet => "kubelet",
            Actor::ControlPlane => "control plane",
            Actor::Nodefence => "nodefence",
            Actor::Bmc => "BMC",
            Actor::Vcenter => "vCenter",
            Actor::Nhc => "NHC",
            Actor::Watchdog => "watchdog",
        }
    }

    pub(super) fn paint(self, style: Style, text: &str) -> String {
        match self {
            Actor::You => style.green(text),
            Actor::Kubelet => style.blue(text),
            Actor::ControlPlane => style.blue(text),
            Actor::Nodefence => style.cyan(text),
            Actor::Bmc | Actor::Vcenter => style.magenta(text),
            Actor::Nhc | Actor::Watchdog => style.yellow(text),
        }
    }
}

/// What happened, for the scenarios to check (the words are in [`Step::text`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// A simulated control-plane component or kubelet; `pod` is `namespace/name`.
    Sim {
        kind: SimEventKind,
        pod: Option<String>,
    },
    /// An Event nodefence wrote, by reason (`ConfirmedOff`, `PowerQueryFailed`...).
    Nodefence { reason: String },
    /// The BMC received a Reset (`ForceOff`, `On`...).
    Reset { reset_type: String },
    /// The BMC's machine reached a power state by itself or on a command.
    Power(MockPower),
    /// Something the person running the demo did.
    You,
    /// A machine's hardware watchdog ran out: it reset the machine (`fired`), or it
    /// could not, unpowered with the machine.
    Watchdog { fired: bool },
    /// A `NodeFenceRemediation` (`name` is `namespace/name`) was created, its
    /// conditions changed, or it was deleted.
    Request { name: String, change: RequestChange },
}

impl Fact {
    /// What happened, as one word for the JSON summary: the simulation's event kind
    /// (`NodeNotReady`), nodefence's Event reason (`ConfirmedOff`), the Reset type
    /// (`ForceOff`), `Power` and the state reached (`PowerOff`), `You`, or `Request`
    /// and the change (`RequestCreated`).
    pub fn key(&self) -> String {
        match self {
            Fact::Sim { kind, .. } => format!("{kind:?}"),
            Fact::Nodefence { reason } => reason.clone(),
            Fact::Reset { reset_type } => reset_type.clone(),
            Fact::Power(state) => format!("Power{state:?}"),
            Fact::You => "You".to_string(),
            Fact::Watchdog { fired: true } => "WatchdogFired".to_string(),
            Fact::Watchdog { fired: false } => "WatchdogUnpowered".to_string(),
            Fact::Request { change, .. } => match change {
                RequestChange::Created => "RequestCreated",
                RequestChange::Conditions(_) => "RequestConditions",
                RequestChange::Deleting => "RequestDeleting",
                RequestChange::Gone => "RequestGone",
            }
            .to_string(),
        }
    }
}

/// What happened to a remediation request.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestChange {
    Created,
    /// The conditions whose status or reason changed, as `(type, status, reason)`.
    Conditions(Vec<(String, String, String)>),
    /// Its deletion was asked for; a finalizer holds it.
    Deleting,
    /// It is gone.
    Gone,
}

/// One line of the story.
#[derive(Debug, Clone)]
pub struct Step {
    pub at: SystemTime,
    /// The node concerned ("" when none).
    pub node: String,
    pub actor: Actor,
    pub fact: Fact,
    pub text: String,
    pub warning: bool,
    /// Steps that repeat (retries) are printed once per scenario per key.
    pub once: Option<String>,
    /// Moments the text refers to: `{@0}`, `{@1}`... in it are printed as the time
    /// of `at + offset` (offset in cluster time) on the scenario's clock, `+68.8s`.
    pub marks: Vec<Mark>,
}

/// A moment a step's text refers to: `at` (wall clock, as the steps' times) plus
/// `offset` (cluster time, e.g. a policy's wait).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mark {
    pub at: SystemTime,
    pub offset: Duration,
}

impl Step {
    pub fn new(at: SystemTime, node: &str, actor: Actor, fact: Fact, text: String) -> Self {
        Self {
            at,
            node: node.to_string(),
            actor,
            fact,
            text,
            warning: false,
            once: None,
            marks: Vec::new(),
        }
    }

    /// Sets the moments `{@0}`, `{@1}`... in the text stand for.
    pub fn marks(mut self, marks: Vec<Mark>) -> Self {
        self.marks = marks;
        self
    }

    /// The text with its marks as times since `t0` on a clock `speed` times slower
    /// than the wall clock (cluster time): `+68.8s`.
    pub fn text_since(&self, t0: SystemTime, speed: f64) -> String {
        let mut text = self.text.clone();
        for (i, mark) in self.marks.iter().enumerate() {
            let secs = match mark.at.duration_since(t0) {
                Ok(d) => d.as_secs_f64() * speed,
                Err(e) => -(e.duration().as_secs_f64() * speed),
            } + mark.offset.as_secs_f64();
            text = text.replace(&format!("{{@{i}}}"), &format!("{secs:+.1}s"));
        }
        text
    }

    pub fn warning(mut self, yes: bool) -> Self {
        self.warning = yes;
        self
    }

    pub fn once(mut self, key: String) -> Self {
        self.once = Some(key);
        self
    }

    /// True for a nodefence Event with this reason.
    pub fn is_nodefence(&self, reason: &str) -> bool {
        matches!(&self.fact, Fact::Nodefence { reason: r } if r == reason)
    }

    /// True for a simulation event of this kind.
    pub fn is_sim(&self, kind: SimEventKind) -> bool {
        matches!(&self.fact, Fact::Sim { kind: k, .. } if *k == kind)
    }

    /// What happened to a remediation request, if this step is about one.
    pub fn request(&self) -> Option<&RequestChange> {
        match &self.fact {
            Fact::Request { change, .. } => Some(change),
            _ => None,
        }
    }

    /// True when this step reports the condition `type_` at `status`.
    pub fn request_condition(&self, type_: &str, status: &str) -> bool {
        matches!(self.request(), Some(RequestChange::Conditions(cs))
            if cs.iter().any(|(t, s, _)| t == type_ && s == status))
    }
}

pub(super) enum Msg {
    Step(Box<Step>),
    Line(String),
    Begin(SystemTime),
    End(oneshot::Sender<()>),
}

/// The shared record and the way to the printer. Cheap to clone.
#[derive(Clone)]
pub struct Story {
    steps: Arc<Mutex<Vec<Step>>>,
    /// When the current scene began ([`Story::begin`]), until [`Story::take_scene`].
    scene: Arc<Mutex<Option<SystemTime>>>,
    tx: mpsc::UnboundedSender<Msg>,
}

impl Story {
    /// Starts the printer writing to `out`; times are shown multiplied by `speed`
    /// (cluster time). The printer ends once every clone of the story is dropped.
    pub fn start(out: Box<dyn Write + Send>, style: Style, speed: f64) -> (Story, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(Printer::new(out, style, speed).run(rx));
        (
            Story {
                steps: Arc::new(Mutex::new(Vec::new())),
                scene: Arc::new(Mutex::new(None)),
                tx,
            },
            task,
        )
    }

    /// Keeps a step and passes it to the printer.
    pub fn record(&self, step: Step) {
        self.steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(step.clone());
        let _ = self.tx.send(Msg::Step(Box::new(step)));
    }

    /// Records something the person running the demo does, now.
    pub fn you(&self, node: &str, text: impl Into<String>) -> SystemTime {
        let at = crate::clock::now();
        self.record(Step::new(at, node, Actor::You, Fact::You, text.into()));
        at
    }

    /// Prints a line as it is, after the steps already due.
    pub fn line(&self, text: impl Into<String>) {
        let _ = self.tx.send(Msg::Line(text.into()));
    }

    /// Starts printing steps that happen from `t0` on, timed from `t0`.
    pub fn begin(&self, t0: SystemTime) {
        *self.scene.lock().unwrap_or_else(|p| p.into_inner()) = Some(t0);
        let _ = self.tx.send(Msg::Begin(t0));
    }

    /// The last scene's start and every step since, in time order, once: `None` when
    /// no scene began since the last call.
    pub fn take_scene(&self) -> Option<(SystemTime, Vec<Step>)> {
        let t0 = self
            .scene
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        Some((t0, self.all(t0, |_| true)))
    }

    /// Prints what is still held back and stops printing steps.
    pub async fn end(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Msg::End(ack)).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(5), done).await;
        }
    }

    /// The first step at or after `since` that matches.
    pub fn find(&self, since: SystemTime, matches: impl Fn(&Step) -> bool) -> Option<Step> {
        let steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        let mut found: Vec<&Step> = steps
            .iter()
            .filter(|s| s.at >= since && matches(s))
            .collect();
        found.sort_by_key(|s| s.at);
        found.first().map(|s| (*s).clone())
    }

    /// The last step before `before` that matches.
    pub fn last(&self, before: SystemTime, matches: impl Fn(&Step) -> bool) -> Option<Step> {
        let steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        steps
            .iter()
            .filter(|s| s.at < before && matches(s))
            .max_by_key(|s| s.at)
            .cloned()
    }

    /// Every step from `since` on that matches, in time order.
    pub fn all(&self, since: SystemTime, matches: impl Fn(&Step) -> bool) -> Vec<Step> {
        let steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        let mut found: Vec<Step> = steps
            .iter()
            .filter(|s| s.at >= since && matches(s))
            .cloned()
            .collect();
        found.sort_by_key(|s| s.at);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn steps_print_in_time_order_only_inside_a_scenario() {
        let sink = Sink::default();
        let (story, printer) = Story::start(Box::new(sink.clone()), Style::new(false), 10.0);
        // In the past, as every real step is by the time the scene ends.
        let t0 = crate::clock::now() - Duration::from_secs(1);
        let step = |ms: u64, text: &str| {
            Step::new(
                t0 + Duration::from_millis(ms),
                "worker-1",
                Actor::Nodefence,
                Fact::Nodefence {
                    reason: text.into(),
                },
                text.to_string(),
            )
        };
        story.record(step(0, "before"));
        story.begin(t0 + Duration::from_millis(1));
        story.record(step(300, "second"));
        story.record(step(100, "first"));
        story.record(step(200, "dup").once("k".into()));
        story.record(step(250, "dup").once("k".into()));
        story.end().await;
        let (begun, scene) = story.take_scene().unwrap();
        assert_eq!(begun, t0 + Duration::from_millis(1));
        let texts: Vec<&str> = scene.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            texts,
            ["first", "dup", "dup", "second"],
            "kept, in time order"
        );
        assert!(story.take_scene().is_none(), "a scene is taken once");
        story.line("done");
        drop(story);
        printer.await.unwrap();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[0].contains("+1.0s") && lines[0].ends_with("first"),
            "{text}"
        );
        assert!(lines[1].ends_with("dup"));
        assert!(lines[2].contains("+3.0s") && lines[2].ends_with("second"));
        assert_eq!(lines[3], "done");
        assert!(lines[0].contains("worker-1   nodefence"), "{text}");
    }
}
