//! `nodefence demo` end to end: the real binary, sped up, without colour. It must exit
//! 0 and tell each scenario's key steps in order; run alone, `recovery` fences a node
//! itself first, and `-o json` leaves the JSON summary alone on standard output.
//! `rack-power` plays at real time whatever `--speed` says (about 80 s).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Fast enough for CI (about 28 s for every scenario), slow enough for a busy machine.
const SPEED: &str = "20";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `nodefence demo ARGS`, killing it if it outlives `deadline`.
fn demo(args: &[&str], log: &Path, deadline: Duration) -> Run {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodefence"))
        .arg("demo")
        .args(args)
        .arg("--log-file")
        .arg(log)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        took: started.elapsed(),
    }
}

/// Asserts that `steps` appear in `text` in this order.
fn in_order(text: &str, steps: &[&str]) {
    let mut from = 0;
    for step in steps {
        match text[from..].find(step) {
            Some(i) => from += i + step.len(),
            None => panic!(
                "{step:?} missing, or not after {:?}, in:\n{text}",
                &text[..from]
            ),
        }
    }
}

/// The time at the start of a story line (`    +68.8s  worker-2 ...`), in seconds.
fn line_time(line: &str) -> Option<f64> {
    line.split_whitespace()
        .next()?
        .strip_prefix('+')?
        .strip_suffix('s')?
        .parse()
        .ok()
}

/// The first line of `text` containing `what`.
fn line_with<'a>(text: &'a str, what: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no line with {what:?} in:\n{text}"))
}

/// `+68.8s` right after `after` in `line`, in seconds.
fn time_after(line: &str, after: &str) -> f64 {
    let rest = &line[line
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} not in {line:?}"))
        + after.len()..];
    let end = rest.find('s').unwrap_or(rest.len());
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("no time after {after:?} in {line:?}"))
}

/// The network cut's narration says when the ForceOff will come and what the wait
/// counts from; the times printed must bear it out (cluster time, as printed).
fn the_stated_wait_is_the_one_kept(scenario: &str) {
    let suspect = line_with(scenario, "nodefence      Lease not renewed for");
    let on = line_with(scenario, "BMC says On");
    let reset = line_with(scenario, "BMC            ForceOff received");
    let (suspect_at, reset_at) = (line_time(suspect).unwrap(), line_time(reset).unwrap());
    let deadline = time_after(on, "ForceOff at +");
    let from = time_after(on, "Lease stale (+");
    assert!((from - suspect_at).abs() < 0.15, "{suspect}\n{on}");
    assert!((deadline - from - 60.0).abs() < 0.15, "{on}");
    // The daemon acts on its own tick and the BMC is polled: a few seconds of
    // cluster time at --speed 20 are a few tenths of a second.
    assert!(
        (reset_at - deadline).abs() < 4.0,
        "ForceOff at +{reset_at}s, stated +{deadline}s:\n{scenario}"
    );
}

/// The text of scenario `n` (from its header to the next one or the summary).
fn section(text: &str, n: usize) -> &str {
    let start = text
        .find(&format!("── {n}/"))
        .unwrap_or_else(|| panic!("no scenario {n} in:\n{text}"));
    let rest = &text[start..];
    let end = match rest[3..].find("── ") {
        Some(i) => i + 3,
        None => rest.find("Summary").unwrap_or(rest.len()),
    };
    &rest[..end]
}

/// The node a scenario's intro says db-0 runs on.
fn db_node_before(section: &str) -> String {
    let after = section.split("db-0 runs on ").nth(1).expect("db-0's node");
    after
        .split(',')
        .next()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_string()
}

/// The node column of the kubelet line saying db-0 is Running.
fn db_running_node(section: &str) -> String {
    let line = section
        .lines()
        .find(|l| l.contains("kubelet") && l.ends_with("db-0 Running"))
        .unwrap_or_else(|| panic!("no db-0 Running line in:\n{section}"));
    line.split_whitespace().nth(1).unwrap().to_string()
}

#[test]
fn the_demo_tells_every_scenario_in_order_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("demo.log");
    let run = demo(
        &["--speed", SPEED, "--no-color"],
        &log,
        Duration::from_secs(120),
    );
    let out = &run.stdout;
    assert_eq!(
        run.code,
        Some(0),
        "took {:?}\nstdout:\n{out}\nstderr:\n{}",
        run.took,
        run.stderr
    );
    assert!(!out.contains('\x1b'), "colour despite --no-color:\n{out}");
    assert!(
        run.stderr.is_empty(),
        "the story goes to stdout only:\n{}",
        run.stderr
    );

    let power_loss = section(out, 1);
    in_order(
        power_loss,
        &[
            "power loss",
            "you            pulls the plug",
            "nodefence      Lease not renewed",
            "nodefence      machine confirmed Off (3 readings)",
            "volume detached",
            "db-0 Running",
            "✓",
        ],
    );
    // The Lease fast path: released, and the pod force-deleted by nodefence, before
    // Kubernetes marks the node NotReady (PodGC would wait for that).
    for step in [
        "nodefence      out-of-service taint added",
        "nodefence      force-deletes 1 pod(s)",
    ] {
        assert!(
            power_loss.contains(step),
            "{step:?} missing in:\n{power_loss}"
        );
    }
    assert_ne!(db_running_node(power_loss), db_node_before(power_loss));

    let network_cut = section(out, 2);
    in_order(
        network_cut,
        &[
            "cuts the network",
            "nodefence      Lease not renewed for",
            "node NotReady",
            "BMC says On: it may only be cut off; ForceOff at +",
            ", 1m after nodefence found its Lease stale (+",
            "), unless the node recovers",
            "nodefence      still On 1m or more after nodefence found its Lease stale (+",
            "): sends ForceOff",
            "BMC            ForceOff received",
            "machine confirmed Off",
            "out-of-service taint added",
            "db-0 Running",
            "✓",
        ],
    );
    assert_ne!(db_running_node(network_cut), db_node_before(network_cut));
    the_stated_wait_is_the_one_kept(network_cut);

    let bmc_down = section(out, 3);
    in_order(
        bmc_down,
        &[
            "the BMC stops answering",
            "cuts the network",
            "nodefence      power state unreadable (",
            "): nothing is released",
            "no power command, no taint",
            "the BMC answers again",
            "sends ForceOff",
            "out-of-service taint added",
            "db-0 Running",
            "✓",
        ],
    );
    let silent = &bmc_down[..bmc_down.find("the BMC answers again").unwrap()];
    assert!(
        !silent.contains("ForceOff") && !silent.contains("taint added"),
        "nothing may happen while the BMC is silent:\n{silent}"
    );

    in_order(
        section(out, 4),
        &[
            "recovery",
            "restores power",
            "node Ready again",
            "nodefence      node Ready again for 30s: out-of-service taint removed",
            "✓",
        ],
    );
    // After the others, nodefence is restarted as NodeHealthCheck's remediator (the
    // `nhc` test below follows the scenario itself).
    in_order(
        section(out, 5),
        &[
            "NodeHealthCheck asks, nodefence proves",
            "(setup) nodefence restarted with [remediation] requests = true and unhealthy_after 10m",
            "creates NodeFenceRemediation nodefence/",
            "sends ForceOff now",
            "Succeeded=True",
            "deletes the request",
            "removes its finalizer",
            "✓",
        ],
    );
    in_order(
        out,
        &[
            "Summary",
            "power-loss",
            "none",
            "network-cut",
            "ForceOff",
            "bmc-down",
            "recovery",
            "nhc",
            "ForceOff",
            "all 5 scenario(s) behaved as expected",
        ],
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("out-of-service taint added"),
        "the daemon's logs go to the log file"
    );
}

#[test]
fn recovery_alone_fences_a_node_first_and_json_goes_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let run = demo(
        &["--speed", SPEED, "--scenario", "recovery", "-o", "json"],
        &dir.path().join("demo.log"),
        Duration::from_secs(60),
    );
    assert_eq!(
        run.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout is not JSON alone:\n{}", run.stdout));
    assert_eq!(summary["ok"], true);
    let only = &summary["scenarios"][0];
    assert_eq!(only["scenario"], "recovery");
    assert!(only["taint_removed_after_s"].as_f64().unwrap() >= 30.0);
    assert_eq!(only["power_commands"], serde_json::json!([]));
    in_order(
        &run.stderr,
        &[
            "(setup)",
            "lost power and nodefence released it",
            "restores power",
            "taint removed",
        ],
    );
}

#[test]
fn a_bad_speed_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = demo(
        &["--speed", "0"],
        &dir.path().join("demo.log"),
        Duration::from_secs(20),
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("between 0.1 and 50"), "{}", run.stderr);
}

#[test]
fn node_health_check_asks_and_nodefence_fences_once_then_lets_the_request_go() {
    let dir = tempfile::tempdir().unwrap();
    let run = demo(
        &["--speed", SPEED, "--scenario", "nhc", "-o", "json"],
        &dir.path().join("demo.log"),
        Duration::from_secs(90),
    );
    assert_eq!(
        run.code,
        Some(0),
        "took {:?}\nstdout:\n{}\nstderr:\n{}",
        run.took,
        run.stdout,
        run.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout is not JSON alone:\n{}", run.stdout));
    assert_eq!(summary["ok"], true);
    let only = &summary["scenarios"][0];
    assert_eq!(only["scenario"], "nhc");
    let node = only["node"].as_str().unwrap();
    // One request, one fence: nothing else reached the BMC (power came back by hand).
    assert_eq!(
        only["power_commands"],
        serde_json::json!([format!("ForceOff {node}")])
    );
    let request = &only["request"];
    assert_eq!(request["name"], format!("nodefence/{node}"));
    let conditions: Vec<&str> = request["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        conditions.first().unwrap().starts_with("Processing=True ("),
        "{conditions:?}"
    );
    assert!(
        conditions
            .last()
            .unwrap()
            .contains("Succeeded=True (Released)"),
        "{conditions:?}"
    );
    let f = |v: &serde_json::Value| {
        v.as_f64()
            .unwrap_or_else(|| panic!("not a number: {v} in {only}"))
    };
    let created = f(&request["created_after_s"]);
    let released = f(&only["released_after_s"]);
    let succeeded = f(&request["succeeded_after_s"]);
    let deleted = f(&request["deleted_after_s"]);
    let untainted = f(&only["taint_removed_after_s"]);
    let gone = f(&request["gone_after_s"]);
    // NodeHealthCheck waited for NotReady plus its duration (a minute of cluster
    // time), far less than nodefence's own unhealthy_after (ten minutes).
    assert!((60.0..300.0).contains(&created), "{only}");
    assert!(created <= released && released <= succeeded, "{only}");
    assert!(
        released < deleted,
        "released before NodeHealthCheck deleted the request: {only}"
    );
    // The taint's removal and the request's disappearance come from two watches: a
    // few seconds of delivery order is not the order of the writes (the scenario's
    // own check allows the same, GONE_ORDER_SLACK in src/demo/scenarios/nhc.rs). The
    // bug this guards against (the finalizer let go with the taint still on) shows
    // as 30 s or more.
    assert!(
        deleted <= untainted && untainted <= gone + 5.0,
        "the finalizer holds the request until the taint is removed: {only}"
    );
    assert_eq!(only["taint_left"], false, "no taint left behind");

    // The story (on stderr with -o json), in cluster-time order.
    let story = &run.stderr;
    in_order(
        story,
        &[
            "NodeHealthCheck asks, nodefence proves",
            "its own unhealthy_after is 10m",
            "you            cuts the network",
            "node NotReady",
            "BMC says On: it may only be cut off; ForceOff at +",
            ", 10m after nodefence found its Lease stale (+",
            "NHC            Ready Unknown for ",
            "creates NodeFenceRemediation nodefence/",
            &format!(
                "nodefence      still On, and NodeFenceRemediation nodefence/{node} asks: sends ForceOff now"
            ),
            "BMC            ForceOff received",
            "machine confirmed Off",
            "out-of-service taint added",
            "request: Processing=False, Succeeded=True (Released)",
            "db-0 Running",
            "restores power (BMC: On) and reconnects the network",
            "node Ready again",
            "NHC            node healthy again: deletes the request; nodefence's finalizer keeps it",
            "nodefence      node Ready again for 30s: out-of-service taint removed",
            "✓",
        ],
    );
    // The finalizer's removal follows the taint's in the API; in the story the two
    // come from two watches and may share a timestamp in either order.
    in_order(
        story,
        &[
            "NHC            node healthy again: deletes the request; nodefence's finalizer keeps it",
            "it removes its finalizer, and the request with it",
            "✓",
        ],
    );
    assert_eq!(
        story.matches("ForceOff received").count(),
        1,
        "one ForceOff:\n{story}"
    );
    assert!(story.contains("request: Processing=True"), "{story}");
}

#[test]
fn vms_on_vcenter_lose_power_or_network_and_nodefence_fences_them_through_vsphere() {
    let dir = tempfile::tempdir().unwrap();
    let run = demo(
        &["--speed", SPEED, "--scenario", "vsphere", "-o", "json"],
        &dir.path().join("demo.log"),
        Duration::from_secs(150),
    );
    assert_eq!(
        run.code,
        Some(0),
        "took {:?}\nstdout:\n{}\nstderr:\n{}",
        run.took,
        run.stdout,
        run.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout is not JSON alone:\n{}", run.stdout));
    assert_eq!(summary["ok"], true);
    let story = &run.stderr;

    // 1. The VM's host loses power: poweredOff read, no power task.
    let lost = &summary["scenarios"][0];
    assert_eq!(lost["scenario"], "vsphere-power-loss");
    let node = lost["node"].as_str().unwrap();
    assert_eq!(lost["power_commands"], serde_json::json!([]), "{lost}");
    let released = lost["released_after_s"].as_f64().unwrap();
    let running = lost["pod_running_after_s"].as_f64().unwrap();
    assert!(released > 0.0 && released <= running, "{lost}");
    let scene = section(story, 1);
    in_order(
        story,
        &[
            "each worker is a VM on a vCenter",
            "a VM's host loses power (vSphere)",
            "you            the VM's host loses power",
            "out-of-service taint added",
            "db-0 Running",
            "✓",
            "read poweredOff through the vsphere driver",
        ],
    );
    assert_eq!(db_node_before(scene), node, "{scene}");
    assert_ne!(
        db_running_node(scene),
        node,
        "db-0 runs elsewhere:\n{scene}"
    );
    assert!(
        !scene.contains("VM_Task received"),
        "no power task:\n{scene}"
    );

    // 2. A VM cut off but poweredOn: one PowerOffVM_Task, then the release.
    let cut = &summary["scenarios"][1];
    assert_eq!(cut["scenario"], "vsphere-network-cut");
    let node = cut["node"].as_str().unwrap();
    assert_eq!(
        cut["power_commands"],
        serde_json::json!([format!("PowerOffVM_Task {node}")]),
        "{cut}"
    );
    let scene = section(story, 2);
    in_order(
        scene,
        &[
            "a VM cut off but poweredOn (vSphere)",
            "you            cuts the VM's network",
            "vCenter        PowerOffVM_Task received",
            "vCenter        VM is poweredOff",
            "out-of-service taint added",
            "db-0 Running",
            "✓",
        ],
    );
    assert_eq!(db_node_before(scene), node, "{scene}");
    assert_ne!(
        db_running_node(scene),
        node,
        "db-0 runs elsewhere:\n{scene}"
    );
    assert_eq!(
        scene.matches("PowerOffVM_Task received").count(),
        1,
        "{scene}"
    );
    for n in [1, 2] {
        let scene = section(story, n);
        assert!(
            !scene.contains("BMC            "),
            "no Redfish BMC speaks in a world of VMs:\n{scene}"
        );
    }
}

/// `rack-power` plays at real time whatever `--speed` says (about 80 s): a machine
/// loses power with its BMC. Act 1, nodefence as by default: it says it cannot read
/// the machine and releases nothing. Act 2, with a companion on every node and
/// `watchdog_fencing`: the node is marked, released on its watchdog no sooner than
/// the stated wait after the mark (the API server's own write times, as the scenario
/// reports them, and the times printed), and db-0 runs elsewhere.
#[test]
fn rack_power_is_held_without_the_watchdog_level_and_released_on_its_watchdog_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = demo(
        &["--speed", SPEED, "--scenario", "rack-power", "-o", "json"],
        &dir.path().join("demo.log"),
        Duration::from_secs(300),
    );
    assert_eq!(
        run.code,
        Some(0),
        "took {:?}\nstdout:\n{}\nstderr:\n{}",
        run.took,
        run.stdout,
        run.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout is not JSON alone:\n{}", run.stdout));
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["speed"], 1.0, "real time, not --speed {SPEED}");
    let only = &summary["scenarios"][0];
    assert_eq!(only["scenario"], "rack-power");
    assert_eq!(only["power_commands"], serde_json::json!([]), "{only}");
    let f = |v: &serde_json::Value| {
        v.as_f64()
            .unwrap_or_else(|| panic!("not a number: {v} in {only}"))
    };
    let w = &only["watchdog"];
    // Act 1: unreadable once the Lease is stale (12 s after its last renewal), and
    // nothing released for the 20 s the demo holds after that.
    assert!(f(&w["unreadable_after_s"]) < 30.0, "{only}");
    assert!(f(&w["held_s"]) >= 20.0, "{only}");
    // Act 2: the companion's silence 2 s after its last beat (sent up to 500 ms before
    // the loss), the mark at once, the release no sooner than the stated wait after
    // it, and db-0 elsewhere.
    let stated = f(&w["stated_wait_s"]);
    assert_eq!(stated, 12.7425, "isolation 2s + watchdog 10s + 1 % + 0.5s");
    let suspect = f(&w["suspect_after_s"]);
    let marked = f(&w["marked_after_s"]);
    let released = f(&only["released_after_s"]);
    assert!((1.4..5.0).contains(&suspect), "{only}");
    assert!(suspect <= marked && marked < suspect + 3.0, "{only}");
    assert!(f(&w["mark_to_release_s"]) >= stated, "{only}");
    assert!(
        released >= marked + stated - 0.1 && released < marked + stated + 10.0,
        "{only}"
    );
    assert!(released < f(&only["pod_running_after_s"]), "{only}");

    let story = &run.stderr;
    in_order(
        story,
        &[
            "real time: --speed does not apply to this scenario",
            "a machine loses power with its BMC (the watchdog level)",
            "Act 1. db-0 runs on ",
            "you            the rack's power fails: the machine is Off",
            "nodefence      power state unreadable (",
            "HTTP 500",
            "): nothing is released",
            "no taint, no mark, no power command",
            "Nothing is released without proof: this is where the watchdog level comes in.",
            "(setup) nodefence restarted with the companions' listener (--companion-listen) and watchdog_fencing = true",
            "(setup) a companion on every node",
            "Act 2. The same outage",
            "you            the rack's power fails again",
            "nodefence      its companion fell silent (no beat for 2s): suspect",
            "nodefence      no power method can be read: marks the node for fencing",
            "nodefence      mark written: the machine is certainly reset (or off) by +",
            "watchdog       not fed for 10s: a running machine would be reset now; this one has no power",
            "nodefence      proven reset by its own watchdog, not read Off",
            "nodefence      out-of-service taint added, on the watchdog's proof (not an Off reading)",
            "db-0 Running",
            "✓",
        ],
    );
    let act_one = &story[story.find("Act 1.").unwrap()..story.find("Nothing is released").unwrap()];
    for never in ["taint added", "mark written", "ForceOff", "db-0 Running"] {
        assert!(!act_one.contains(never), "{never:?} in act 1:\n{act_one}");
    }
    // The times printed bear the stated wait out: the release no sooner than the
    // moment the mark's Event named, which is the wait after the mark.
    let act_two = &story[story.find("Act 2.").unwrap()..];
    let stated_line = line_with(act_two, "mark written: the machine is certainly reset");
    let by = time_after(stated_line, "by +");
    let marked_line = line_time(stated_line).unwrap();
    assert!(
        (by - marked_line - stated).abs() < 0.5,
        "{stated_line}\n(the mark's answer comes just before its Event)"
    );
    let released_line = line_with(
        act_two,
        "out-of-service taint added, on the watchdog's proof",
    );
    assert!(
        line_time(released_line).unwrap() >= by - 0.1,
        "released before the stated moment:\n{act_two}"
    );
    assert!(
        line_with(act_two, "proven reset by its own watchdog").contains(
            "isolation 2s + watchdog 10s + drift margin 242.5ms (1.0 %) + allowance 500ms = 12.7425s"
        ),
        "{act_two}"
    );
    assert_ne!(db_running_node(act_two), only["node"].as_str().unwrap());
}

/// `power-loss --companions` plays at real time: the plug is pulled right after a
/// Lease renewal (the Lease goes stale only 12 s later), the victim's companion dies
/// with its machine, and nodefence makes the node suspect for the companion's silence,
/// still releases it only on the BMC's Off readings, sends no power command, and no
/// watchdog resets a running machine.
#[test]
fn power_loss_with_companions_is_heard_through_the_companion_and_still_proven_off() {
    let dir = tempfile::tempdir().unwrap();
    let run = demo(
        &[
            "--speed",
            SPEED,
            "--scenario",
            "power-loss",
            "--companions",
            "--pull-after-renewal",
            "0s",
            "-o",
            "json",
        ],
        &dir.path().join("demo.log"),
        Duration::from_secs(180),
    );
    assert_eq!(
        run.code,
        Some(0),
        "took {:?}\nstdout:\n{}\nstderr:\n{}",
        run.took,
        run.stdout,
        run.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout is not JSON alone:\n{}", run.stdout));
    assert_eq!(summary["speed"], 1.0, "real time, not --speed {SPEED}");
    let only = &summary["scenarios"][0];
    assert_eq!(only["scenario"], "power-loss");
    assert_eq!(only["power_commands"], serde_json::json!([]), "{only}");
    let c = &only["companions"];
    assert_eq!(c["suspect_by_companion"], true, "{only}");
    assert_eq!(c["watchdog_resets"], serde_json::json!([]), "{only}");
    assert_eq!(
        c["leader_killed_after_s"],
        serde_json::Value::Null,
        "{only}"
    );
    // Suspect 2 s after the last beat, released before the Lease could say anything.
    let suspect = c["suspect_after_s"].as_f64().unwrap();
    let released = only["released_after_s"].as_f64().unwrap();
    assert!(suspect < 4.0 && suspect <= released, "{only}");
    assert!(released < 10.0, "not through the companion: {only}");
    in_order(
        &run.stderr,
        &[
            "real time: --speed does not apply",
            "(setup) a companion on every node, beating every 500ms to nodefence",
            "its companion dies with it",
            "its companion fell silent (no beat for 2s): suspect",
            "machine confirmed Off (3 readings)",
            "out-of-service taint added",
            "db-0 Running",
            "✓",
        ],
    );
    let first_suspect = line_with(&run.stderr, "suspect");
    assert!(
        first_suspect.contains("its companion fell silent"),
        "suspect first through its Lease, not its companion:\n{}",
        run.stderr
    );
}

/// `--kill-leader-after`: a standby replica runs beside the leader, the companions
/// beat to both, and the leader is killed mid-incident (after the node is suspect,
/// before its third Off reading), its Lease not released: the standby takes the Lease
/// over once it expires and releases the node itself; while no leader answers, the
/// companions feed on the API server's word and no watchdog resets a running machine.
#[test]
fn a_leader_killed_mid_incident_is_finished_by_the_standby_that_kept_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let run = demo(
        &[
            "--scenario",
            "power-loss",
            "--companions",
            "--kill-leader-after",
            "2200ms",
            "-o",
            "json",
        ],
        &dir.path().join("demo.log"),
        Duration::from_secs(240),
    );
    assert_eq!(
        run.code,
        Some(0),
        "took {:?}\nstdout:\n{}\nstderr:\n{}",
        run.took,
        run.stdout,
        run.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout is not JSON alone:\n{}", run.stdout));
    let only = &summary["scenarios"][0];
    let c = &only["companions"];
    let f = |v: &serde_json::Value| {
        v.as_f64()
            .unwrap_or_else(|| panic!("not a number: {v} in {only}"))
    };
    assert_eq!(c["released_by_standby"], true, "{only}");
    assert_eq!(c["watchdog_resets"], serde_json::json!([]), "{only}");
    assert_eq!(only["power_commands"], serde_json::json!([]), "{only}");
    let killed = f(&c["leader_killed_after_s"]);
    let leads = f(&c["new_leader_after_s"]);
    let released = f(&only["released_after_s"]);
    // The Lease (15 s) expires on the standby's clock after its last renewal seen.
    assert!(leads >= killed + 12.0, "{only}");
    assert!(released >= leads, "released before the standby led: {only}");
    assert!(f(&only["pod_running_after_s"]) > released, "{only}");
    in_order(
        &run.stderr,
        &[
            "beating every 500ms to both replicas of nodefence (a standby runs)",
            "its companion dies with it",
            "its companion fell silent (no beat for 2s): suspect",
            "kills nodefence's leader (nodefence-demo)",
            "machine confirmed Off (3 readings)",
            "out-of-service taint added",
            "db-0 Running",
            "✓",
        ],
    );
}

#[test]
fn companions_apply_to_power_loss_only_and_a_kill_needs_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("demo.log");
    let run = demo(
        &["--scenario", "network-cut", "--companions"],
        &log,
        Duration::from_secs(20),
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--companions applies to --scenario power-loss only"),
        "{}",
        run.stderr
    );
    let run = demo(
        &["--scenario", "power-loss", "--kill-leader-after", "2s"],
        &log,
        Duration::from_secs(20),
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--companions"), "{}", run.stderr);
}
