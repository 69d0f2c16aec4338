//! The node lifecycle controller's zone disruption modes and its rate-limited
//! NoExecute tainting, ported from `node_lifecycle_controller.go`.
//!
//! Unreachable nodes are not tainted `NoExecute` all at once: each zone
//! (`topology.kubernetes.io/region` + `zone` labels; one zone when unlabelled) has a
//! queue drained at `--node-eviction-rate` (0.1 node/s, burst 1). The zone's state
//! changes that rate:
//! - Normal: 0.1/s.
//! - PartialDisruption (more than 2 and at least 55% of its nodes not Ready): 0.01/s
//!   in zones over 50 nodes, otherwise *no tainting at all*.
//! - FullDisruption (no Ready node): back to 0.1/s (the zone is probably gone),
//!   unless every zone is fully disrupted: then the controller assumes its own
//!   network is the problem ("master disruption mode"), removes the NoExecute taints
//!   from all nodes and stops tainting until some node is Ready again.
//!
//! This matters to a fencing tool: in a small cluster where several nodes die
//! together, their pods are never evicted by the taint manager.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::clock::Clock;
use super::config::{
    EVICTION_QPS, LARGE_CLUSTER_THRESHOLD, SECONDARY_EVICTION_QPS, UNHEALTHY_ZONE_THRESHOLD,
};
use super::objects::label;

/// `nodetopology.GetZoneKey`: `region:\0:zone`, or "" without topology labels.
pub fn zone_key(node: &Value) -> String {
    let get = |stable: &str, beta: &str| {
        label(node, stable)
            .or_else(|| label(node, beta))
            .unwrap_or_default()
            .to_string()
    };
    let zone = get(
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    );
    let region = get(
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    );
    if zone.is_empty() && region.is_empty() {
        return String::new();
    }
    format!("{region}:\u{0}:{zone}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    Initial,
    Normal,
    FullDisruption,
    PartialDisruption,
}

/// `ComputeZoneState` from the Ready status of each node of a zone.
pub fn compute_zone_state(ready: &[bool]) -> ZoneState {
    let ready_count = ready.iter().filter(|r| **r).count();
    let not_ready = ready.len() - ready_count;
    if ready_count == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / ready.len() as f64 >= UNHEALTHY_ZONE_THRESHOLD {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// client-go's token bucket with burst 1, in simulated time; qps 0 never accepts.
#[derive(Debug, Clone)]
struct TokenBucket {
    qps: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(qps: f64) -> Self {
        Self {
            qps,
            tokens: 1.0,
            last: Instant::now(),
        }
    }

    fn try_accept(&mut self, clock: Clock) -> bool {
        if self.qps <= 0.0 {
            return false;
        }
        let elapsed = clock.since(self.last).as_secs_f64();
        self.last = Instant::now();
        self.tokens = (self.tokens + elapsed * self.qps).min(1.0);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One zone's `RateLimitedTimedQueue` of nodes to taint.
#[derive(Debug, Clone)]
pub struct Tainter {
    limiter: TokenBucket,
    queue: Vec<(String, Instant)>,
}

impl Tainter {
    fn new(qps: f64) -> Self {
        Self {
            limiter: TokenBucket::new(qps),
            queue: Vec::new(),
        }
    }

    /// Queues a node unless queued already.
    pub fn add(&mut self, node: &str) -> bool {
        if self.queue.iter().any(|(n, _)| n == node) {
            return false;
        }
        self.queue.push((node.to_string(), Instant::now()));
        true
    }

    pub fn remove(&mut self, node: &str) -> bool {
        let before = self.queue.len();
        self.queue.retain(|(n, _)| n != node);
        before != self.queue.len()
    }

    /// `SwapLimiter`: a new bucket (drained if the old one was), or "never".
    fn swap_limiter(&mut self, qps: f64, clock: Clock) {
        if (self.limiter.qps - qps).abs() < f64::EPSILON {
            return;
        }
        let mut next = TokenBucket::new(qps);
        if qps > 0.0 && !self.limiter.try_accept(clock) {
            next.try_accept(clock);
        }
        self.limiter = next;
    }

    /// `Try`: processes due nodes in order while the limiter allows; `act` returns
    /// whether it is done with the node, or the simulated delay before a retry.
    pub fn try_each(&mut self, clock: Clock, mut act: impl FnMut(&str) -> Result<(), Duration>) {
        while let Some((node, at)) = self.queue.first().cloned() {
            if !self.limiter.try_accept(clock) {
                break;
            }
            if Instant::now() < at {
                break;
            }
            self.queue.remove(0);
            if let Err(retry) = act(&node) {
                self.queue.push((node, clock.after(retry)));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// What `handle_disruption` asks of the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruption {
    Nothing,
    /// Entering master disruption mode: remove NoExecute taints from every node.
    MarkAllReachable,
    /// Leaving it: consider every node freshly probed.
    ResetProbes,
}

/// Zone states and tainting queues.
#[derive(Debug, Default)]
pub struct Zones {
    states: BTreeMap<String, ZoneState>,
    tainters: BTreeMap<String, Tainter>,
}

impl Zones {
    /// `addPodEvictorForNewZone`.
    pub fn ensure(&mut self, zone: &str) {
        if !self.states.contains_key(zone) {
            self.states.insert(zone.to_string(), ZoneState::Initial);
            self.tainters
                .insert(zone.to_string(), Tainter::new(EVICTION_QPS));
        }
    }

    pub fn tainter(&mut self, zone: &str) -> &mut Tainter {
        self.ensure(zone);
        self.tainters
            .entry(zone.to_string())
            .or_insert_with(|| Tainter::new(EVICTION_QPS))
    }

    pub fn tainters(&mut self) -> impl Iterator<Item = &mut Tainter> {
        self.tainters.values_mut()
    }

    pub fn has_pending(&self) -> bool {
        self.tainters.values().any(|t| !t.is_empty())
    }

    fn set_limiter(&mut self, zone: &str, size: usize, state: ZoneState, clock: Clock) {
        let qps = match state {
            ZoneState::Normal | ZoneState::FullDisruption => EVICTION_QPS,
            ZoneState::PartialDisruption if size > LARGE_CLUSTER_THRESHOLD => {
                SECONDARY_EVICTION_QPS
            }
            ZoneState::PartialDisruption => 0.0,
            ZoneState::Initial => return,
        };
        self.tainter(zone).swap_limiter(qps, clock);
    }

    /// `handleDisruption` from each zone's nodes' Ready status.
    pub fn handle_disruption(
        &mut self,
        zone_ready: &HashMap<String, Vec<bool>>,
        clock: Clock,
    ) -> Disruption {
        let mut new_states: HashMap<String, ZoneState> = HashMap::new();
        let mut all_full = true;
        for (zone, ready) in zone_ready {
            let state = compute_zone_state(ready);
            if state != ZoneState::FullDisruption {
                all_full = false;
            }
            new_states.insert(zone.clone(), state);
            self.ensure(zone);
        }
        self.states.retain(|z, _| zone_ready.contains_key(z));
        let all_was_full = self
            .states
            .values()
            .all(|s| *s == ZoneState::FullDisruption);
        if all_full && all_was_full {
            return Disruption::Nothing;
        }
        let size = |z: &str| zone_ready.get(z).map_or(0, Vec::len);
        let zones: Vec<String> = self.states.keys().cloned().collect();
        if all_full {
            for z in &zones {
                self.tainter(z).swap_limiter(0.0, clock);
                self.states.insert(z.clone(), ZoneState::FullDisruption);
            }
            return Disruption::MarkAllReachable;
        }
        if all_was_full {
            for z in &zones {
                let state = new_states.get(z).copied().unwrap_or(ZoneState::Normal);
                self.set_limiter(z, size(z), state, clock);
                self.states.insert(z.clone(), state);
            }
            return Disruption::ResetProbes;
        }
        for z in &zones {
            let new = new_states.get(z).copied().unwrap_or(ZoneState::Normal);
            if self.states.get(z) == Some(&new) {
                continue;
            }
            tracing::info!("node lifecycle: zone {z:?} is now {new:?}");
            self.set_limiter(z, size(z), new, clock);
            self.states.insert(z.clone(), new);
        }
        Disruption::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_states() {
        assert_eq!(compute_zone_state(&[true, false]), ZoneState::Normal);
        assert_eq!(
            compute_zone_state(&[false, false]),
            ZoneState::FullDisruption
        );
        assert_eq!(
            compute_zone_state(&[true, false, false, false]),
            ZoneState::PartialDisruption
        );
        assert_eq!(compute_zone_state(&[true, false, false]), ZoneState::Normal);
    }

    #[test]
    fn small_partially_disrupted_zone_stops_tainting() {
        let clock = Clock::new(1.0);
        let mut zones = Zones::default();
        let mut ready = HashMap::new();
        ready.insert(String::new(), vec![true; 5]);
        assert_eq!(zones.handle_disruption(&ready, clock), Disruption::Nothing);
        ready.insert(String::new(), vec![true, false, false, false]);
        zones.handle_disruption(&ready, clock);
        zones.tainter("").add("a");
        let mut done = Vec::new();
        zones.tainter("").try_each(clock, |n| {
            done.push(n.to_string());
            Ok(())
        });
        assert!(
            done.is_empty(),
            "no tainting in a small partially disrupted zone"
        );
        ready.insert(String::new(), vec![false, false]);
        assert_eq!(
            zones.handle_disruption(&ready, clock),
            Disruption::MarkAllReachable
        );
    }
}
