#!/usr/bin/env python3
"""Proves the whole-system simulation can fail: applies each deliberate bug to a copy of
the source, plays the simulation's seeds against it, and expects a failure naming the
invariant the bug breaks. Run: python3 tests/sim/mutations.py [--seeds N] [NAME ...]
(default: the 150 seeds CI plays, plus the regression seeds and the scripted scenarios).
`--check` only verifies that every mutation still applies (CI runs it: moving code must
move its mutations too).

A mutation whose text is no longer in the source is an error (the list must follow the
code); a mutation the simulation does not catch makes the script exit 1.
"""
import argparse, os, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name, [(file, text, replacement)], the invariant that must catch it
MUTATIONS = [
    ("release-on-one-reading",
     [("src/engine/decide.rs",
       "let proven = inc.off_readings.len() >= policy.confirm_readings.max(1) as usize",
       "let proven = !inc.off_readings.is_empty()")],
     "invariant 1"),
    ("contradicting-reading-kept",
     [("src/engine/outcomes.rs",
       "                        }\n                        inc.off_readings.clear();\n                        let recently_commanded",
       "                        }\n                        let recently_commanded")],
     "invariant 1"),
    # Two layers since seeds 206/764: the engine's gate and the executor's identity
    # check in the reading right before each command (either alone holds).
    ("no-identity-gate",
     [("src/engine/decide.rs",
       "IdentityCheck::Mismatch { .. } => Some(Block::Identity(check)),",
       "IdentityCheck::Mismatch { .. } => None,"),
      ("src/engine/decide.rs",
       "IdentityCheck::Unknown(_) if policy.require_identity => Some(Block::Identity(check)),",
       "IdentityCheck::Unknown(_) if policy.require_identity => None,"),
      ("src/controller/executor.rs",
       "if check.is_mismatch() || (target.require_identity && !check.is_match()) {",
       "if false {")],
     "invariant 2"),
    ("every-replica-leads",
     [("src/cluster/leader.rs",
       "    pub fn is_leader(&self) -> bool {\n        self.held().is_some()\n",
       "    pub fn is_leader(&self) -> bool {\n        true || self.held().is_some()\n")],
     "invariant 3"),
    # The pause has two layers since seeds 10400/11586/11834: the engine's gate and the
    # executor's fresh read of the switch before each command and release.
    ("pause-ignored",
     [("src/engine/node.rs",
       "        } else if self.paused {\n            Some(Block::Paused)",
       "        } else if self.paused && false {\n            Some(Block::Paused)"),
      ("src/cluster/pause.rs",
       "    pub async fn allows(&self, outcome: &str) -> Result<(), String> {\n",
       "    pub async fn allows(&self, outcome: &str) -> Result<(), String> {\n        if outcome.len() < usize::MAX {\n            return Ok(());\n        }\n")],
     "invariant 2"),
    # Two layers since seed 2702: leadership checked again right before the command,
    # and the engine's storm/sync hold shared with the executor (a deposed leader that
    # leads again holds its old command through its new term's sync).
    ("leader-not-rechecked-before-command",
     [("src/controller/executor.rs",
       "ForceOff went out 7 s after its decision, 7 s after it lost the Lease).\n        if !self.leadership.is_leader() {",
       "ForceOff went out 7 s after its decision, 7 s after it lost the Lease).\n        if !self.leadership.is_leader() && false {"),
      ("src/controller/executor.rs",
       "        if action == \"off\"\n            && let Some(why) = self.power_off_hold.held()",
       "        if action == \"off\"\n            && false\n            && let Some(why) = self.power_off_hold.held()")],
     "invariant 2|invariant 3|invariant 4"),
    # Scripted since the clock skews moved the regression seeds: a pause half a second
    # after a power-off was decided.
    ("pause-not-read-before-commands",
     [("src/cluster/pause.rs",
       "    pub async fn allows(&self, outcome: &str) -> Result<(), String> {\n",
       "    pub async fn allows(&self, outcome: &str) -> Result<(), String> {\n        if outcome.len() < usize::MAX {\n            return Ok(());\n        }\n")],
     "invariant 2"),
    # Seed 6386: the engine's opt-out gate holds unless its Node watch lags; the
    # write-ahead record's fresh Node is the second layer. Scripted since the clock
    # skews moved the regression seeds: an opt-out just after the decision.
    ("opt-out-not-rechecked-at-record",
     [("src/cluster/release.rs",
       "if crate::cluster::facts::opted_out(&now) {",
       "if crate::cluster::facts::opted_out(&now) && false {")],
     "invariant 2"),
    # Two layers since seed 2702: the engine's gate and its hold shared with the
    # executor, checked right before each power-off (either alone holds).
    ("storm-ignored",
     [("src/engine/decide.rs",
       "    if gates.storm {\n        set_block(inc, Block::Storm, name, out);\n        return;\n    }",
       ""),
      ("src/controller/executor.rs",
       "        if action == \"off\"\n            && let Some(why) = self.power_off_hold.held()",
       "        if action == \"off\"\n            && false\n            && let Some(why) = self.power_off_hold.held()")],
     "invariant 2"),
    # Invariant 4 has two layers since seeds 5121/5439/6483: the engine's (retry timer,
    # the power-off recorded on the Node) and the executor's (no ForceOff to a machine
    # whose pre-command reading is Off). Either alone holds it, so each engine mutant
    # also removes the executor's check.
    ("power-off-retried-at-once",
     [("src/engine/decide.rs",
       "if now.duration_since(at).unwrap_or_default() < policy.power_off_retry_after {",
       "if false {"),
      ("src/controller/executor.rs",
       "if action == \"off\" && state == PowerState::Off {",
       "if action == \"off\" && state == PowerState::Off && false {")],
     "invariant 4"),
    ("power-off-record-ignored",
     [("src/engine/node.rs",
       "            PowerOffStatus::Sent { at, attempt }\n        }\n        _ => PowerOffStatus::NotSent,",
       "            let _ = (at, attempt);\n            PowerOffStatus::NotSent\n        }\n        _ => PowerOffStatus::NotSent,"),
      ("src/controller/executor.rs",
       "if action == \"off\" && state == PowerState::Off {",
       "if action == \"off\" && state == PowerState::Off && false {")],
     "invariant 4"),
    # Seed 5340: the kubelet renewed 0.9 s after the ForceOff, while the machine was
    # still going down; a new term took the record for an earlier failure's.
    ("power-off-record-boot-ignored",
     [("src/engine/node.rs",
       "                || facts.power_off_this_boot\n",
       "                || false && facts.power_off_this_boot\n")],
     "invariant 4"),
    ("command-identity-unchecked",
     [("src/controller/executor.rs",
       "if check.is_mismatch() || (target.require_identity && !check.is_match()) {",
       "if false {")],
     "invariant 2|invariant 5"),
    ("power-on-not-retried",
     [("src/engine/outcomes.rs",
       "rel.power_on = PowerOnStatus::Pending;\n                    rel.power_on_failures += 1;",
       "rel.power_on = PowerOnStatus::Done;\n                    rel.power_on_failures += 1;")],
     "invariant 5"),
    ("unrecorded-power-on-forgotten",
     [("src/engine/mod.rs",
       "&& self.policy_for(&name).power_on_after_fence",
       "&& self.policy_for(&name).power_on_after_fence && false")],
     "invariant 5"),
    ("act-before-leases-synced",
     [("src/controller/mod.rs",
       "if !(seen.pause_synced && seen.nodes_synced && seen.leases_synced && requests_synced) {",
       "if !(seen.pause_synced && seen.nodes_synced && requests_synced) {")],
     "invariant 2"),
    # Remediation requests (seeds whose plan has them: about half). Two layers since
    # seed 1219: the engine's gate and the executor's fresh read of the requests
    # before each power command (`remediation::gate`).
    ("request-timeout-ignored",
     [("src/remediation/request.rs",
       "timed_out: self.timed_out.is_some(),",
       "timed_out: false,"),
      ("src/remediation/gate.rs",
       "    pub async fn allows(&self, node: &str, outcome: &str) -> Result<(), String> {\n",
       "    pub async fn allows(&self, node: &str, outcome: &str) -> Result<(), String> {\n        if outcome.len() < usize::MAX {\n            return Ok(());\n        }\n")],
     "invariant 8"),
    # Seed 1219: a request timed out while the request watch was failing.
    ("requests-not-read-before-commands",
     [("src/remediation/gate.rs",
       "    pub async fn allows(&self, node: &str, outcome: &str) -> Result<(), String> {\n",
       "    pub async fn allows(&self, node: &str, outcome: &str) -> Result<(), String> {\n        if outcome.len() < usize::MAX {\n            return Ok(());\n        }\n")],
     "invariant 8"),
    # Two layers: the engine's memory of served requests and the Succeeded a request
    # reports (which a new leader reads).
    ("served-request-served-again",
     [("src/engine/mod.rs",
       ".is_some_and(|r| !r.timed_out && self.served_requests.contains(&r.uid))",
       ".is_some_and(|_| false)"),
      ("src/remediation/request.rs",
       "if self.deleting || self.reported_succeeded() && self.timed_out.is_none() {",
       "if self.deleting {")],
     "invariant 9|invariant 4"),
    # Seed 7104: a request made while its node was released, seen by no replica
    # until the taint was removed: the end of the last release, kept on the Node,
    # serves it.
    ("last-release-forgotten",
     [("src/engine/mod.rs",
       "(Some(ended), _) if request.since <= ended && release_end_believed(ended, now) => {\n",
       "(Some(ended), _) if request.since <= ended && ended < ended => {\n")],
     "invariant 9"),
    # Companion seeds (about half) and the scripted scenario of a node marked while
    # it feeds on its peers: without the majority check a release goes out while the
    # machine runs (random seeds 91 and 97 of the first 100 caught it).
    ("watchdog-no-majority",
     [("watchdog/src/release.rs",
       "    if !peers_majority(heard, evidence.cluster) {",
       "    if false && !peers_majority(heard, evidence.cluster) {")],
     "invariant 1"),
    # Seed 1971: a clean stop no replica heard disarmed the watchdog the leader still
    # counted (the simulation's rolling restart asks the real rule).
    ("stop-disarms-unacknowledged",
     [("src/companion/mod.rs",
       "        if !told {\n            return false;\n        }\n",
       "")],
     "invariant 1"),
    # Seed 4252: a ForceOff decided in one term went out in the next (the same replica
    # won the Lease back), after that term's own ForceOff: the term's actions lead
    # only in their term.
    ("actions-outlive-their-term",
     [("src/controller/mod.rs",
       "let (_term, leadership) = parts.leadership.this_term();",
       "let (_term, leadership) = ((), parts.leadership.clone());")],
     "invariant 4"),
    # Seed 4610: a mark that stops feeding for good leaves the next boot's companion,
    # told the old boot's mark before the leader cleared it, unarmed for good.
    ("mark-never-lifted",
     [("watchdog/src/feeding.rs",
       "            Some(_) => self.marked = None,\n",
       "            Some(_) => return,\n")],
     "invariant 6"),
    # Issue 52, item 3 (seed 90400): a watchdog reported by an earlier boot's companion
    # taken for the boot the Node reports now.
    ("stale-boot-trusted",
     [("src/heartbeat/mod.rs",
       "            if !boot.is(reported) {",
       "            if !boot.is(reported) && false {")],
     "invariant 1"),
    ("request-finalizer-kept",
     [("src/controller/requests.rs",
       "} else if !hold && request.finalizer && node.is_ok() {",
       "} else if !hold && request.finalizer && node.is_ok() && false {")],
     "invariant 10"),
]

# Not in the run: mutants no schedule can tell from the real code, and why.
EQUIVALENT = {
    "off-readings-not-fresh": "Off readings only begin after a failure is seen, and a newer sign of "
    "life (a renewal) comes from a machine that is on, whose next reading clears the proof; removing "
    "the freshness filter in the engine, the proof and the releaser together changes no schedule.",
}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=150)
    ap.add_argument("--check", action="store_true", help="only check that each mutation applies")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if m[2] and (not args.names or m[0] in args.names)]
    if args.check:
        stale = [f"{name}: {path} does not hold exactly one {old!r}"
                 for name, edits, _ in chosen for path, old, _ in edits
                 if open(os.path.join(ROOT, path)).read().count(old) != 1]
        print("\n".join(stale) or f"{len(chosen)} mutations apply")
        sys.exit(1 if stale else 0)
    work = tempfile.mkdtemp(prefix="nodefence-mutant-")
    target = os.path.join(ROOT, "target", "mutants")
    missed, results = [], []
    try:
        for name, edits, invariant in chosen:
            copy = os.path.join(work, "src")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("target", ".git", "fuzz"))
            for path, old, new in edits:
                p = os.path.join(copy, path)
                text = open(p).read()
                if text.count(old) != 1:
                    sys.exit(f"mutation {name}: {path} no longer holds exactly one {old!r}; update tests/sim/mutations.py")
                open(p, "w").write(text.replace(old, new))
            env = dict(os.environ, CARGO_TARGET_DIR=target, NODEFENCE_SIM_SEEDS=str(args.seeds))
            started = time.time()
            out = subprocess.run(
                ["cargo", "test", "--release", "-q", "--test", "simulation", "--", "--nocapture"],
                cwd=copy, env=env, capture_output=True, text=True)
            text = out.stdout + out.stderr
            wanted = invariant.split("|")
            caught = out.returncode != 0 and any(w in text for w in wanted)
            if out.returncode != 0 and "error[" in text and "invariant" not in text:
                sys.exit(f"mutation {name} does not compile:\n{text[-3000:]}")
            first = next((l.strip() for l in text.splitlines() if any(w in l for w in wanted)), "")
            results.append((name, caught, time.time() - started, first))
            print(f"{'caught' if caught else 'MISSED'}  {name:28} {time.time() - started:5.0f}s  {first[:150]}", flush=True)
            if not caught:
                missed.append(name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(results) - len(missed)} of {len(results)} mutations caught")
    sys.exit(1 if missed else 0)

if __name__ == "__main__":
    main()
