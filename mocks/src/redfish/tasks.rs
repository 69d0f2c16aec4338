//! Redfish tasks: how an iLO-style BMC answers a Reset it will finish later.
//!
//! The Reset POST answers `202 Accepted` with the `Location` of a task monitor. The
//! monitor answers 202 while the power transition runs and the finished Task once
//! the system has settled; the Task resource itself lives under
//! `/redfish/v1/TaskService/Tasks/<id>`. A task's completion is tied to the system's
//! own transition, so "Completed" is never claimed before the state has changed
//! (unless a lying fault is injected, in which case it completes on a no-op).

use std::time::SystemTime;

use tokio::time::Instant;

/// One Reset handled asynchronously.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) id: u64,
    pub(crate) system: String,
    pub(crate) reset_type: String,
    /// The Reset target URI the task was created for.
    pub(crate) target: String,
    pub(crate) started: SystemTime,
    started_at: Instant,
    done_at: Instant,
}

impl Task {
    pub(crate) fn is_done(&self, now: Instant) -> bool {
        now >= self.done_at
    }

    /// Wall-clock time the task finished (or will finish).
    pub(crate) fn ended(&self) -> SystemTime {
        self.started + self.done_at.saturating_duration_since(self.started_at)
    }

    /// Progress in percent, from elapsed time.
    pub(crate) fn percent(&self, now: Instant) -> u64 {
        let total = self.done_at.saturating_duration_since(self.started_at);
        if total.is_zero() || self.is_done(now) {
            return 100;
        }
        let elapsed = now.saturating_duration_since(self.started_at);
        let pct = elapsed.as_millis().saturating_mul(100) / total.as_millis().max(1);
        u64::try_from(pct.min(99)).unwrap_or(99)
    }
}

/// Every task created since start.
#[derive(Debug, Default)]
pub(crate) struct TaskStore {
    tasks: Vec<Task>,
}

impl TaskStore {
    pub(crate) fn create(
        &mut self,
        system: &str,
        reset_type: &str,
        target: &str,
        now: Instant,
        done_at: Instant,
    ) -> Task {
        let task = Task {
            id: self.tasks.len() as u64 + 1,
            system: system.to_owned(),
            reset_type: reset_type.to_owned(),
            target: target.to_owned(),
            started: nodefence_clock::now(),
            started_at: now,
            done_at,
        };
        self.tasks.push(task.clone());
        task
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Task> {
        let id: u64 = id.parse().ok()?;
        self.tasks.iter().find(|t| t.id == id)
    }

    pub(crate) fn ids(&self) -> Vec<u64> {
        self.tasks.iter().map(|t| t.id).collect()
    }
}
