//! What the leader publishes of its companions' table, for `nodefence status`: each
//! node's companion (beating, silent or stopped; its armed watchdog and granted
//! timeout; marked for fencing), written into the state ConfigMap
//! (`nodefence-state`, binaryData `companions`) every [`PUBLISH_EVERY`] when it
//! changed. A change is a state, a watchdog or a mark; beat times are not (they change
//! twice a second), so a fleet that beats steadily writes nothing.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use nodefence_watchdog::wire::WatchdogState;

use super::table::Table;

/// How often the leader compares its table with what it last published.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(10);
/// The binaryData key in the state ConfigMap.
pub const KEY: &str = "companions";

/// One node's companion, as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompanionReport {
    pub node: String,
    /// `beating`, `silent` (was beating, silent for `heartbeat_timeout`) or `stopped`
    /// (said so: a rolling update).
    pub state: String,
    /// The granted timeout of its armed hardware watchdog, in seconds; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog_seconds: Option<u64>,
    /// Its driver (`iTCO_wdt`, ...), as its beats name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog_device: Option<String>,
    /// Marked for fencing (the watchdog level).
    #[serde(default)]
    pub marked: bool,
    /// For a silent or stopped one: its last beat (RFC 3339, to the second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_beat: Option<String>,
    /// The node's policy has the watchdog level on (its companion is told to arm);
    /// absent in what an older leader published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<bool>,
    /// Its watchdog is being disarmed (the level was turned off), still armed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disarming: bool,
}

impl CompanionReport {
    /// `beating, watchdog iTCO_wdt 10s armed`, `silent since <time>`, ... for a table cell.
    pub fn describe(&self) -> String {
        let mut out = self.state.clone();
        if let Some(t) = &self.last_beat {
            out.push_str(&format!(" since {t}"));
        }
        match (self.watchdog_seconds, &self.watchdog_device) {
            (Some(w), Some(device)) => out.push_str(&format!(", watchdog {device} {w}s armed")),
            (Some(w), None) => out.push_str(&format!(", watchdog {w}s armed")),
            (None, _) => out.push_str(", no watchdog"),
        }
        // Why it is armed, or not.
        match (self.watchdog_seconds.is_some(), self.disarming, self.level) {
            (true, true, _) => out.push_str(" (disarming: its level was turned off)"),
            (true, false, Some(true)) => out.push_str(" (its level is on)"),
            (true, false, Some(false)) => {
                out.push_str(" (its level is off: a driver that cannot stop, fed until reboot)")
            }
            (false, _, Some(true)) => out.push_str(" (its level is on: nothing to fence it by)"),
            (false, _, Some(false)) => out.push_str(" (its level is off)"),
            (_, _, None) => {}
        }
        if self.marked {
            out.push_str(", MARKED");
        }
        out
    }
}

/// The table as published at `now` (its clock) and `wall` (the same moment on the
/// wall clock); `marked`: whether a node is marked.
pub fn of_table(
    table: &Table,
    now: Duration,
    wall: SystemTime,
    timeout: Duration,
    marked: impl Fn(&str) -> bool,
    level: impl Fn(&str) -> bool,
) -> Vec<CompanionReport> {
    table
        .companions()
        .filter_map(|(node, c)| {
            let last = c.last_beat?;
            let age = now.saturating_sub(last);
            let alive = if age >= timeout { "silent" } else { "beating" };
            let (state, watchdog) = match c.watchdog {
                WatchdogState::Stopping => ("stopped", None),
                WatchdogState::Armed { granted, device }
                | WatchdogState::Disarming { granted, device } => (alive, Some((granted, device))),
                WatchdogState::None => (alive, None),
            };
            let last_beat = (state != "beating").then(|| {
                humantime::format_rfc3339_seconds(wall - age.min(Duration::from_secs(1 << 32)))
                    .to_string()
            });
            Some(CompanionReport {
                node: node.clone(),
                state: state.into(),
                watchdog_seconds: watchdog.map(|(w, _)| w.as_secs()),
                watchdog_device: watchdog.map(|(_, d)| d.as_str().to_string()),
                marked: marked(node),
                last_beat,
                level: Some(level(node)),
                disarming: matches!(c.watchdog, WatchdogState::Disarming { .. }),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodefence_watchdog::feeding::Reaching;
    use nodefence_watchdog::session::CompanionEnd;
    use nodefence_watchdog::timing::Timing;
    use nodefence_watchdog::wire::Key;

    #[test]
    fn beating_silent_and_stopped_companions_are_published_without_beat_times() {
        let mut t = Table::new(Timing::default());
        let armed = WatchdogState::Armed {
            granted: Duration::from_secs(10),
            device: nodefence_watchdog::wire::DeviceName::new("iTCO_wdt"),
        };
        for (i, (node, state, at)) in [
            ("w1", armed, 9_000),
            ("w2", armed, 1_000),
            ("w3", WatchdogState::Stopping, 8_000),
            ("w4", WatchdogState::None, 9_500),
        ]
        .into_iter()
        .enumerate()
        {
            let session = t.open(node, i as u64 + 1, Key([3; 32]));
            let mut c = CompanionEnd::new(Key([3; 32]), session, Duration::from_secs(2));
            t.beat(
                &c.beat(Duration::from_millis(1), Reaching::default(), state),
                Duration::from_millis(at),
                true,
                |_| false,
            )
            .unwrap_or_else(|e| panic!("{e:?}"));
        }
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_010);
        let report = of_table(
            &t,
            Duration::from_secs(10),
            wall,
            Duration::from_secs(2),
            |n| n == "w2",
            |n| n != "w4",
        );
        let cells: Vec<String> = report.iter().map(CompanionReport::describe).collect();
        assert_eq!(
            cells,
            [
                "beating, watchdog iTCO_wdt 10s armed (its level is on)",
                "silent since 2027-01-15T08:00:01Z, watchdog iTCO_wdt 10s armed (its level is on), MARKED",
                "stopped since 2027-01-15T08:00:08Z, no watchdog (its level is on: nothing to fence it by)",
                "beating, no watchdog (its level is off)",
            ]
        );
        // A later look at a steady fleet publishes the same thing.
        let later = of_table(
            &t,
            Duration::from_millis(10_400),
            wall + Duration::from_millis(400),
            Duration::from_secs(2),
            |n| n == "w2",
            |n| n != "w4",
        );
        assert_eq!(later, report);
    }
}
