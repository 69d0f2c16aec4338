//! Unit tests of the object store: metadata, versions, conflicts, watch history.

use super::*;
use crate::kube::resources::{LEASES, NODES, PODS};

fn node(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {}})
}

#[test]
fn create_fills_metadata_and_versions_increase_across_types() {
    let s = Store::default();
    let a = s.create(NODES, None, node("a")).unwrap();
    let p = s
        .create(
            PODS,
            Some("default"),
            json!({"metadata": {"generateName": "web-"}}),
        )
        .unwrap();
    let rv = |v: &Value| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&p) > rv(&a));
    assert_eq!(a["kind"], "Node");
    assert_eq!(a["apiVersion"], "v1");
    assert!(a["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(p["metadata"]["name"].as_str().unwrap().starts_with("web-"));
    assert_eq!(p["metadata"]["namespace"], "default");
    assert_eq!(
        s.create(NODES, None, node("a")).unwrap_err().code(),
        409,
        "AlreadyExists"
    );
}

#[test]
fn stale_update_is_a_conflict_and_unconditional_update_wins() {
    let s = Store::default();
    let created = s
        .create(
            LEASES,
            Some("kube-system"),
            json!({"metadata": {"name": "l"}, "spec": {}}),
        )
        .unwrap();
    let mut first = created.clone();
    first["spec"]["holderIdentity"] = json!("a");
    let updated = s.update(LEASES, Some("kube-system"), "l", first).unwrap();
    let mut stale = created.clone();
    stale["spec"]["holderIdentity"] = json!("b");
    let err = s
        .update(LEASES, Some("kube-system"), "l", stale.clone())
        .unwrap_err();
    assert_eq!(err.code(), 409);
    assert_eq!(err.reason(), "Conflict");
    stale["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let won = s.update(LEASES, Some("kube-system"), "l", stale).unwrap();
    assert_eq!(won["spec"]["holderIdentity"], "b");
    assert_eq!(
        won["metadata"]["uid"], updated["metadata"]["uid"],
        "uid is kept"
    );
}

#[test]
fn watch_resumes_from_history_and_old_versions_are_gone() {
    let s = Store::new(3);
    for n in ["a", "b", "c", "d", "e"] {
        s.create(NODES, None, node(n)).unwrap();
    }
    let now = s.resource_version();
    let (backlog, _rx) = s.subscribe_from(now - 2).unwrap();
    assert_eq!(backlog.len(), 2);
    let err = s.subscribe_from(1).unwrap_err();
    assert_eq!(err.code(), 410);
}

#[tokio::test]
async fn list_and_subscribe_misses_nothing() {
    let s = Store::default();
    s.create(NODES, None, node("a")).unwrap();
    let (items, rv, mut rx) = s.list_and_subscribe(NODES, None);
    assert_eq!(items.len(), 1);
    s.modify(NODES, None, "a", |o| {
        o["spec"]["unschedulable"] = json!(true);
        Ok(())
    })
    .unwrap();
    let e = rx.recv().await.unwrap();
    assert_eq!(e.event, EventType::Modified);
    assert!(e.resource_version > rv);
    s.delete(NODES, None, "a", None).unwrap();
    let e = rx.recv().await.unwrap();
    assert_eq!(e.event, EventType::Deleted);
    assert_eq!(s.get(NODES, None, "a").unwrap_err().code(), 404);
}

#[test]
fn a_no_op_modify_is_not_a_write() {
    let s = Store::default();
    s.create(NODES, None, node("a")).unwrap();
    let before = s.resource_version();
    s.modify(NODES, None, "a", |_| Ok(())).unwrap();
    assert_eq!(s.resource_version(), before);
}

#[test]
fn state_at_an_old_version_is_rebuilt_from_history() {
    let s = Store::default();
    s.create(NODES, None, node("a")).unwrap();
    s.create(NODES, None, node("b")).unwrap();
    let at = s.resource_version();
    s.modify(NODES, None, "a", |o| {
        o["metadata"]["labels"] = json!({"x": "y"});
        Ok(())
    })
    .unwrap();
    s.delete(NODES, None, "b", None).unwrap();
    s.create(NODES, None, node("c")).unwrap();
    s.create(LEASES, Some("kube-system"), node("l")).unwrap();
    let (state, backlog, _rx) = s.subscribe_from_with_state(NODES, None, at).unwrap();
    let names: Vec<&str> = state
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!(state[0]["metadata"].get("labels").is_none(), "a as it was");
    assert_eq!(backlog.len(), 4, "every later write, all types");
    assert_eq!(
        s.subscribe_from_with_state(NODES, None, 0)
            .map(|_| ())
            .unwrap_err()
            .code(),
        410
    );
}

#[test]
fn delete_precondition_is_checked() {
    let s = Store::default();
    s.create(NODES, None, node("a")).unwrap();
    assert_eq!(
        s.delete(NODES, None, "a", Some("1")).unwrap_err().code(),
        409
    );
    assert!(s.delete(NODES, None, "a", None).is_ok());
}
