//! Following a vSphere Task: `info.state` read with the PropertyCollector until it
//! is `success` or `error` (`queued` and `running` wait), never past the operation
//! deadline. A task's success only means vSphere accepted and ran the command; the
//! driver still reads the power state back.

use std::time::Duration;

use tokio::time::Instant;

use super::soap::{Element, MoRef};

/// Pause between polls of a running task (govmomi's task waiter polls about this
/// often when it has no property-collector updates).
pub const TASK_POLL: Duration = Duration::from_millis(250);

/// `TaskInfo.state`, with `info.error` when it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    /// `queued` or `running`: not done yet.
    Pending(String),
    Success,
    /// `error`: the fault's type and localized message.
    Error {
        fault_type: String,
        message: String,
    },
}

/// Reads a `RetrievePropertiesEx` reply for one task (`info.state`, `info.error`).
pub fn read_task(reply: &Element) -> Result<TaskOutcome, String> {
    let Some(object) = reply.child("returnval").and_then(|r| r.child("objects")) else {
        return Err("the task is not in the reply".into());
    };
    let mut state = None;
    let mut error = None;
    for prop in object.children_named("propSet") {
        match prop.child_text("name") {
            Some("info.state") => state = prop.child("val").map(|v| v.text.trim().to_string()),
            Some("info.error") => error = prop.child("val").cloned(),
            _ => {}
        }
    }
    match state.as_deref() {
        Some("success") => Ok(TaskOutcome::Success),
        Some(s @ ("queued" | "running")) => Ok(TaskOutcome::Pending(s.to_string())),
        Some("error") => {
            let fault_type = error
                .as_ref()
                .and_then(|e| e.child("fault"))
                .and_then(|f| f.attribute("type"))
                .map(|t| t.rsplit(':').next().unwrap_or(t).to_string())
                .unwrap_or_default();
            let message = error
                .as_ref()
                .and_then(|e| e.child_text("localizedMessage"))
                .unwrap_or("")
                .to_string();
            Ok(TaskOutcome::Error {
                fault_type: super::soap::clip(&fault_type),
                message: super::soap::clip(&message),
            })
        }
        Some(other) => Err(format!("unknown task state {:?}", super::soap::clip(other))),
        None => Err("the reply has no info.state".into()),
    }
}

/// The pause before the next poll, or `None` when it would pass `deadline`.
pub fn next_poll(deadline: Instant) -> Option<Duration> {
    (Instant::now() + TASK_POLL < deadline).then_some(TASK_POLL)
}

/// The task a `PowerOffVM_Task`/`PowerOnVM_Task` reply names.
pub fn task_of(reply: &Element) -> Option<MoRef> {
    reply
        .child("returnval")
        .and_then(MoRef::from_element)
        .filter(|m| m.kind == "Task")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::power::vsphere::soap::parse;

    fn reply(props: &str) -> Element {
        parse(&format!(
            r#"<RetrievePropertiesExResponse><returnval><objects><obj type="Task">task-1</obj>{props}</objects></returnval></RetrievePropertiesExResponse>"#
        ))
        .unwrap()
    }

    #[test]
    fn task_states_are_read_as_the_api_names_them() {
        let state = |s: &str| {
            read_task(&reply(&format!(
                r#"<propSet><name>info.state</name><val xsi:type="TaskInfoState">{s}</val></propSet>"#
            )))
        };
        assert_eq!(state("queued"), Ok(TaskOutcome::Pending("queued".into())));
        assert_eq!(state("running"), Ok(TaskOutcome::Pending("running".into())));
        assert_eq!(state("success"), Ok(TaskOutcome::Success));
        assert!(state("Success").is_err(), "case matters");
        assert!(read_task(&reply("")).is_err());
        let failed = read_task(&reply(
            r#"<propSet><name>info.error</name><val xsi:type="LocalizedMethodFault"><fault xsi:type="InvalidPowerState"><requestedState>poweredOff</requestedState><existingState>poweredOff</existingState></fault><localizedMessage>The attempted operation cannot be performed in the current state (Powered off).</localizedMessage></val></propSet><propSet><name>info.state</name><val xsi:type="TaskInfoState">error</val></propSet>"#,
        ))
        .unwrap();
        assert_eq!(
            failed,
            TaskOutcome::Error {
                fault_type: "InvalidPowerState".into(),
                message: "The attempted operation cannot be performed in the current state (Powered off).".into()
            }
        );
    }
}
