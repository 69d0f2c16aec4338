//! The failures a vSphere endpoint shows in the field, injected through the handle
//! (or the admin API): slow power tasks, a task that ends in error, a user without
//! the power privilege, a load balancer answering for a vCenter that is down, a
//! server older than vSphere 6.5 (no `SearchIndex.FindAllByUuid`).
//! Session expiry, out-of-band power changes, renames and moves are handle methods
//! of their own (they change state rather than how calls are answered).

use std::time::Duration;

/// One injected failure mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Power tasks stay `queued`, then `running`, this long before they finish
    /// (replaces the builder's task delay).
    SlowTasks(Duration),
    /// The next power task ends in `error` with this fault type
    /// (`GenericVmConfigFault`, `TaskInProgress`, ...); the VM's power is unchanged.
    FailNextTask(String),
    /// `PowerOffVM_Task`/`PowerOnVM_Task` are refused with `NoPermission` (a user
    /// with read-only rights on the VM).
    NoPowerPrivilege,
    /// Every SOAP call answers HTTP 503 with an HTML page.
    Unavailable,
    /// A server before vSphere 6.5: `FindAllByUuid` is not in its WSDL, and it answers
    /// as vSphere answers a method it cannot resolve, a `ServerFaultCode` fault
    /// "Unable to resolve WSDL method name FindAllByUuid for namespace name urn:vim25"
    /// whose detail is an `InvalidRequest`. `FindByUuid` (the first match) still works.
    NoFindAllByUuid,
}

/// The faults in force.
#[derive(Debug, Clone, Default)]
pub(super) struct Faults {
    pub task_delay: Option<Duration>,
    pub fail_next_task: Option<String>,
    pub no_power_privilege: bool,
    pub unavailable: bool,
    pub no_find_all_by_uuid: bool,
}

impl Faults {
    pub fn apply(&mut self, fault: Fault) {
        match fault {
            Fault::SlowTasks(delay) => self.task_delay = Some(delay),
            Fault::FailNextTask(name) => self.fail_next_task = Some(name),
            Fault::NoPowerPrivilege => self.no_power_privilege = true,
            Fault::Unavailable => self.unavailable = true,
            Fault::NoFindAllByUuid => self.no_find_all_by_uuid = true,
        }
    }
}
