//! Randomized fault schedules through the real engine, checking the one rule on every release.

use std::collections::VecDeque;

use super::*;

/// A tiny deterministic PRNG so the schedules are reproducible without a dependency.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// `len` BMC answers drawn from `states`.
    fn script(
        &mut self,
        states: &[Result<PowerState, ()>],
        len: usize,
    ) -> VecDeque<Result<PowerState, ()>> {
        (0..len)
            .map(|_| states[self.below(states.len() as u64) as usize].clone())
            .collect()
    }
}

#[test]
fn random_fault_schedules_never_release_without_proof() {
    let states = [
        Ok(PowerState::Off),
        Ok(PowerState::On),
        Ok(PowerState::PoweringOff),
        Ok(PowerState::Unknown(String::new())),
        Err(()),
    ];
    let mut releases = 0;
    for seed in 1..=300u64 {
        let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut h = Harness::new(Policy {
            confirm_interval: Duration::from_millis(500 + rng.below(2000)),
            max_unhealthy: MaxUnhealthy::Count(3),
            ..Policy::default()
        });
        let nodes = ["a", "b", "c", "d"];
        for n in nodes {
            let script = rng.script(&states, 200);
            h.add(n, Bmc::Script(script));
        }
        for _ in 0..120 {
            let n = nodes[rng.below(4) as usize];
            match rng.below(6) {
                0 => h.not_ready(n),
                1 => h.ready(n),
                2 => {
                    let now = h.now;
                    h.set_facts(n, |f| f.lease_renewed = Some(now));
                }
                3 => {
                    let script = rng.script(&states, 50);
                    h.bmc.insert(n.into(), Bmc::Script(script));
                }
                _ => {}
            }
            h.advance(Duration::from_millis(250 * (1 + rng.below(40))));
        }
        releases += h.count(|a| matches!(a, Action::Release { .. }));
    }
    assert!(releases > 0, "the schedules must exercise releases at all");
}

/// The same with the watchdog level on: BMCs that mostly fail, companions that fall
/// silent and beat again, watchdogs armed or not, waits of every length. Every
/// release is checked: an Off release by its readings, a watchdog release by its
/// mark, its wait, its armed watchdog and no answer from the power source since the
/// last sign of life ([`Harness::check_release`]).
#[test]
fn random_schedules_with_the_watchdog_level_never_release_without_proof() {
    let states = [
        Ok(PowerState::Off),
        Ok(PowerState::On),
        Err(()),
        Err(()),
        Err(()),
    ];
    let (mut watchdog_releases, mut off_releases) = (0, 0);
    for seed in 1..=300u64 {
        let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut h = Harness::new(Policy {
            confirm_interval: Duration::from_millis(500 + rng.below(2000)),
            max_unhealthy: MaxUnhealthy::Count(3),
            watchdog_fencing: true,
            ..Policy::default()
        });
        h.watchdog_wait = Duration::from_millis(1_000 + rng.below(20_000));
        let nodes = ["a", "b", "c", "d"];
        for n in nodes {
            let script = rng.script(&states, 200);
            h.add(n, Bmc::Script(script));
            if rng.below(3) > 0 {
                h.armed.insert(n.into());
            }
        }
        for _ in 0..120 {
            let n = nodes[rng.below(4) as usize];
            match rng.below(8) {
                0 => h.not_ready(n),
                1 => h.ready(n),
                2 => {
                    let now = h.now;
                    h.set_facts(n, |f| f.lease_renewed = Some(now));
                }
                3 => {
                    let script = rng.script(&states, 50);
                    h.bmc.insert(n.into(), Bmc::Script(script));
                }
                4 => {
                    let last_beat = h.now;
                    h.set_facts(n, |f| {
                        f.companion_silent = Some(CompanionSilence {
                            last_beat,
                            declared: last_beat + secs(2),
                        })
                    });
                }
                5 => h.set_facts(n, |f| f.companion_silent = None),
                6 if !h.armed.remove(n) => {
                    h.armed.insert(n.into());
                }
                _ => {}
            }
            h.advance(Duration::from_millis(250 * (1 + rng.below(40))));
        }
        for a in &h.log {
            match a {
                Action::Release {
                    proof: ReleaseProof::Watchdog(_),
                    ..
                } => watchdog_releases += 1,
                Action::Release { .. } => off_releases += 1,
                _ => {}
            }
        }
    }
    assert!(
        watchdog_releases > 0 && off_releases > 0,
        "the schedules must exercise both kinds of release: {watchdog_releases} on the watchdog, {off_releases} on Off readings"
    );
}
