//! This replica's clock against each companion's: a replica that stood still (a
//! paused VM, a stopped process) while the companions ran finds out from their beats
//! before it acknowledges one as the leader's again ([`SkewWatch`]).

use std::time::Duration;

use nodefence_watchdog::timing::Timing;
use nodefence_watchdog::wire::BootId;

/// This replica's clock against one companion's, to notice that this replica stood
/// still while the companion's clock ran (a paused VM resuming, a stopped process:
/// its monotonic clock stopped, and it would go on acknowledging as the leader on a
/// lease that ran out while it stood): the companion's sending times (its
/// `CLOCK_BOOTTIME`, one clock for one boot, across its processes) grow faster than
/// this replica's receiving times by more than drift and [`PAUSE_TOLERANCE`] allow.
///
/// Kept as `shrink(sent) − received`, which no drift within the rule's bound makes
/// grow (a beat delayed in the network makes it smaller, never larger). The reference
/// is the largest reading of the last two windows of [`SKEW_WINDOW`] (the least
/// delayed beat: a quicker beat than most, or drift over a long life, never adds up to
/// a false alarm), and a reading joins it only once this replica's clock has moved on
/// by [`SETTLE`]: the beats queued while it stood, read in one instant, are each
/// compared with the reference from before, not with one another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SkewWatch {
    boot: Option<BootId>,
    /// This window's start (this replica's clock), its largest reading, the last's.
    window: Duration,
    current: Option<i128>,
    previous: Option<i128>,
    /// Readings not in the reference yet: when the first was received, the largest.
    pending: Option<(Duration, i128)>,
}

/// How much faster than drift allows a companion's clock may seem to run before this
/// replica takes itself for paused: more than a beat delayed in the network against
/// one that was not. Pauses shorter than about this are within what the Lease's own
/// margin (`lease_duration` − `renew_deadline`) covers.
pub const PAUSE_TOLERANCE: Duration = Duration::from_secs(1);
/// The length of one window of the skew's reference.
const SKEW_WINDOW: Duration = Duration::from_secs(5);
/// How far this replica's clock moves on before a reading joins the reference.
const SETTLE: Duration = Duration::from_millis(400);

impl SkewWatch {
    /// A beat of `boot` sent at `sent` (its clock) received `received` (this
    /// replica's): whether this replica stood still since the reference.
    pub(super) fn beat(
        &mut self,
        timing: &Timing,
        boot: BootId,
        sent: Duration,
        received: Duration,
    ) -> bool {
        let reading = i128::try_from(timing.shrink(sent).as_nanos()).unwrap_or(i128::MAX)
            - i128::try_from(received.as_nanos()).unwrap_or(i128::MAX);
        if self.boot != Some(boot) {
            *self = SkewWatch {
                boot: Some(boot),
                window: received,
                pending: Some((received, reading)),
                ..SkewWatch::default()
            };
            return false;
        }
        if let Some((at, largest)) = self.pending
            && received.saturating_sub(at) >= SETTLE
        {
            self.pending = None;
            if at.saturating_sub(self.window) >= SKEW_WINDOW {
                self.previous = self.current;
                self.current = None;
                self.window = at;
            }
            self.current = Some(self.current.map_or(largest, |c| c.max(largest)));
        }
        let tolerance = i128::try_from(PAUSE_TOLERANCE.as_nanos()).unwrap_or(0);
        let paused = self
            .current
            .max(self.previous)
            .is_some_and(|r| reading > r.saturating_add(tolerance));
        if paused {
            // This replica's clock is behind for good now: the reference starts over
            // from here.
            self.previous = None;
            self.current = Some(reading);
            self.window = received;
            self.pending = None;
            return true;
        }
        self.pending = Some(match self.pending {
            Some((at, largest)) => (at, largest.max(reading)),
            None => (received, reading),
        });
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    /// Beats of one boot every 500 ms, their receipt `delay`ed by the network.
    fn beats(w: &mut SkewWatch, t: &Timing, boot: BootId, from: f64, to: f64, delay: f64) -> bool {
        let mut any = false;
        let mut sent = from;
        while sent < to {
            any |= w.beat(t, boot, s(sent), s(sent + 100.0 + delay));
            sent += 0.5;
        }
        any
    }

    #[test]
    fn drift_and_a_jittery_network_never_look_like_a_pause() {
        let t = Timing::default();
        let boot = BootId([1; 16]);
        let mut w = SkewWatch::default();
        assert!(!beats(&mut w, &t, boot, 0.0, 60.0, 0.0));
        // Delays that come and go by up to 800 ms.
        for (i, delay) in [0.8, 0.0, 0.4, 0.8, 0.1].iter().enumerate() {
            let from = 60.0 + 10.0 * i as f64;
            assert!(
                !beats(&mut w, &t, boot, from, from + 10.0, *delay),
                "{delay}"
            );
        }
        // A companion clock 1 % fast against a replica 1 % slow, for an hour.
        let mut w = SkewWatch::default();
        let mut any = false;
        for k in 0..7_200 {
            let real = f64::from(k) * 0.5;
            any |= w.beat(&t, boot, s(real * 1.01), s(100.0 + real * 0.99));
        }
        assert!(!any, "drift within the rule's bound");
    }

    #[test]
    fn a_replica_that_stood_still_finds_out_from_the_next_beats() {
        let t = Timing::default();
        let boot = BootId([1; 16]);
        let mut w = SkewWatch::default();
        assert!(!beats(&mut w, &t, boot, 0.0, 30.0, 0.0));
        // Paused 5 s: the companion's next beat (a new session, or the last of those
        // queued) was sent 5 s later than the replica's clock says it arrived.
        assert!(w.beat(&t, boot, s(35.0), s(130.0)));
        // Told once; the clock is behind for good now, and what follows is normal.
        assert!(!w.beat(&t, boot, s(35.5), s(130.5)));
        // Queued beats read at once after a pause: found out within the tolerance.
        let mut w = SkewWatch::default();
        assert!(!beats(&mut w, &t, boot, 0.0, 30.0, 0.0));
        let found = (0..20)
            .map(|k| 30.0 + f64::from(k) * 0.5)
            .position(|sent| w.beat(&t, boot, s(sent), s(130.0)));
        assert_eq!(
            found,
            Some(3),
            "1.5 s of the companion's time in one instant"
        );
        // Another boot (or a companion that never beat before) starts a new watch.
        assert!(!w.beat(&t, BootId([2; 16]), s(5.0), s(131.0)));
    }
}
