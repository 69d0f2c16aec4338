//! What a running mock vSphere holds: its VMs, logged-in sessions, power tasks and
//! faults, and the record of every call, behind one lock.
//!
//! Tasks follow `TaskInfo.state` as vCenter reports it: `queued` for the first
//! third of the task's duration, `running` until it ends, then `success` or `error`.
//! The VM's power changes when (and only when) its task succeeds; the change is
//! applied by whoever looks first after that moment, so readings are consistent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::faults::Faults;
use super::model::{Product, VmPower, VmState};

/// Fixed settings of one mock.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub product: Product,
    /// Every datacenter's name, the default first; the `n`th is
    /// [`Product::datacenter_moid`]`(n)`.
    pub datacenters: Vec<String>,
    pub username: String,
    pub password: String,
    pub task_delay: Duration,
}

/// A power operation a task performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerOp {
    PowerOff,
    PowerOn,
}

impl PowerOp {
    pub fn method(self) -> &'static str {
        match self {
            PowerOp::PowerOff => "PowerOffVM_Task",
            PowerOp::PowerOn => "PowerOnVM_Task",
        }
    }
    fn result(self) -> VmPower {
        match self {
            PowerOp::PowerOff => VmPower::PoweredOff,
            PowerOp::PowerOn => VmPower::PoweredOn,
        }
    }
}

/// A fault a task ends with: its type and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFault {
    pub fault_type: String,
    pub message: String,
    /// For `InvalidPowerState`: the state the VM was in.
    pub existing_state: Option<VmPower>,
    pub requested_state: Option<VmPower>,
}

/// One task.
#[derive(Debug, Clone)]
pub(super) struct Task {
    pub id: String,
    pub vm: String,
    pub op: PowerOp,
    pub started: Instant,
    pub delay: Duration,
    pub outcome: Result<(), TaskFault>,
    pub applied: bool,
}

/// `TaskInfoState` of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskInfoState {
    Queued,
    Running,
    Success,
    Error(TaskFault),
}

impl TaskInfoState {
    pub fn as_str(&self) -> &'static str {
        match self {
            TaskInfoState::Queued => "queued",
            TaskInfoState::Running => "running",
            TaskInfoState::Success => "success",
            TaskInfoState::Error(_) => "error",
        }
    }
}

impl Task {
    fn state(&self, now: Instant) -> TaskInfoState {
        let elapsed = now.saturating_duration_since(self.started);
        if elapsed < self.delay / 3 {
            TaskInfoState::Queued
        } else if elapsed < self.delay {
            TaskInfoState::Running
        } else {
            match &self.outcome {
                Ok(()) => TaskInfoState::Success,
                Err(f) => TaskInfoState::Error(f.clone()),
            }
        }
    }
}

/// One call the mock answered: SOAP at `/sdk`, or REST at `/rest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// The SOAP operation (`Login`, `FindByUuid`, `PowerOffVM_Task`, ...), or the
    /// REST request line with `{vm}` for the VM (`POST /rest/vcenter/vm/{vm}/power/stop`).
    pub method: String,
    /// The `_this` managed object id (REST: the VM's id, or "").
    pub this: String,
    /// The `SOAPAction` header as sent ("" when absent, and for REST).
    pub soap_action: String,
    /// Whether the call carried a live session (cookie, or REST's session id).
    pub authenticated: bool,
}

#[derive(Debug, Default)]
pub(super) struct Inner {
    pub vms: Vec<VmState>,
    /// Session key → user name.
    pub sessions: HashMap<String, String>,
    pub tasks: Vec<Task>,
    pub faults: Faults,
    pub calls: Vec<CallRecord>,
    /// Container views: id → the datacenter they cover (`None`: every VM).
    pub views: HashMap<String, Option<String>>,
}

impl Config {
    /// The name of the datacenter with this managed object id.
    pub fn datacenter_named_by(&self, moid: &str) -> Option<&str> {
        self.datacenters
            .iter()
            .enumerate()
            .find(|(i, _)| self.product.datacenter_moid(i + 1) == moid)
            .map(|(_, name)| name.as_str())
    }

    /// The managed object id of the datacenter at this inventory path.
    pub fn datacenter_at(&self, path: &str) -> Option<String> {
        self.datacenters
            .iter()
            .position(|name| name == path)
            .map(|i| self.product.datacenter_moid(i + 1))
    }
}

/// State shared between the server and the handle.
#[derive(Debug)]
pub(super) struct Shared {
    pub config: Config,
    inner: Mutex<Inner>,
}

impl Shared {
    pub fn new(config: Config, vms: Vec<VmState>) -> Arc<Self> {
        Arc::new(Self {
            config,
            inner: Mutex::new(Inner {
                vms,
                ..Inner::default()
            }),
        })
    }

    /// The state, with every task due by now applied.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.settle(Instant::now());
        inner
    }
}

impl Inner {
    fn settle(&mut self, now: Instant) {
        let mut changes = Vec::new();
        for task in &mut self.tasks {
            if !task.applied && task.state(now) == TaskInfoState::Success {
                task.applied = true;
                changes.push((task.vm.clone(), task.op.result()));
            }
        }
        for (moid, power) in changes {
            if let Some(vm) = self.vms.iter_mut().find(|v| v.moid == moid) {
                vm.power = power;
            }
        }
    }

    pub fn vm(&self, moid: &str) -> Option<&VmState> {
        self.vms.iter().find(|v| v.moid == moid)
    }

    pub fn vm_mut(&mut self, moid: &str) -> Option<&mut VmState> {
        self.vms.iter_mut().find(|v| v.moid == moid)
    }

    /// Starts a power task on `moid` (which exists): the outcome is decided now, as
    /// vCenter checks the power state when the task starts.
    pub fn start_task(&mut self, moid: &str, op: PowerOp, default_delay: Duration) -> String {
        let id = format!("task-{}", 100 + self.tasks.len());
        let current = self.vm(moid).map(|v| v.power);
        let invalid = matches!(
            (op, current),
            (PowerOp::PowerOff, Some(VmPower::PoweredOff))
                | (PowerOp::PowerOn, Some(VmPower::PoweredOn))
        );
        let outcome = if let Some(fault_type) = self.faults.fail_next_task.take() {
            Err(TaskFault {
                message: format!("A general system error occurred: injected {fault_type}"),
                fault_type,
                existing_state: None,
                requested_state: None,
            })
        } else if invalid {
            let existing = current.unwrap_or(VmPower::PoweredOff);
            Err(TaskFault {
                fault_type: "InvalidPowerState".into(),
                message: format!(
                    "The attempted operation cannot be performed in the current state ({}).",
                    existing.described()
                ),
                existing_state: Some(existing),
                requested_state: Some(op.result()),
            })
        } else {
            Ok(())
        };
        self.tasks.push(Task {
            id: id.clone(),
            vm: moid.to_string(),
            op,
            started: Instant::now(),
            delay: self.faults.task_delay.unwrap_or(default_delay),
            outcome,
            applied: false,
        });
        id
    }

    /// A task's state now, or `None` for an unknown task id.
    pub fn task_state(&self, id: &str) -> Option<TaskInfoState> {
        self.tasks
            .iter()
            .find(|t| t.id == id)
            .map(|t| t.state(Instant::now()))
    }
}
