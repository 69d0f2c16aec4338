//! Session sequence numbers: the outbound counter and the inbound sliding window of
//! IPMI v2.0 §6.12.13.
//!
//! Each side numbers the packets it sends in a session from 1 upwards (0 is never used
//! inside a session). A receiver accepts a number up to [`WINDOW`] ahead of the highest
//! one seen so far, or up to [`WINDOW`] behind it if that number has not been seen yet;
//! everything else — replays, stale packets, jumps far ahead, zero — is refused.

use crate::{Error, Result};

/// How far ahead of, or behind, the highest accepted number a packet may be.
pub const WINDOW: u32 = 16;

/// The numbers this side puts on the packets it sends.
#[derive(Debug, Clone, Default)]
pub struct Outbound {
    last: u32,
}

impl Outbound {
    /// The next number (1, 2, …; skips 0 on wrap).
    pub fn next_seq(&mut self) -> u32 {
        self.last = self.last.wrapping_add(1);
        if self.last == 0 {
            self.last = 1;
        }
        self.last
    }
}

/// The inbound window: which numbers the peer may still use.
#[derive(Debug, Clone, Default)]
pub struct Inbound {
    /// Highest number accepted so far (0 = none yet).
    highest: u32,
    /// Bit `i` set: `highest - 1 - i` has been seen.
    seen_behind: u32,
}

impl Inbound {
    /// Checks `seq` and records it if acceptable.
    pub fn accept(&mut self, seq: u32) -> Result<()> {
        let refuse = || Error::OutOfSequence {
            got: seq,
            highest: self.highest,
        };
        if seq == 0 {
            return Err(refuse());
        }
        if self.highest == 0 {
            self.highest = seq;
            return Ok(());
        }
        let ahead = seq.wrapping_sub(self.highest);
        if ahead != 0 && ahead <= WINDOW {
            // Shift the bitmap: the old highest is now `ahead - 1` behind the new one.
            self.seen_behind = if ahead >= 32 {
                0
            } else {
                (self.seen_behind << ahead) | (1 << (ahead - 1))
            };
            self.highest = seq;
            return Ok(());
        }
        let behind = self.highest.wrapping_sub(seq);
        if behind != 0 && behind <= WINDOW {
            let bit = 1u32 << (behind - 1);
            if self.seen_behind & bit == 0 {
                self.seen_behind |= bit;
                return Ok(());
            }
        }
        Err(refuse())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbound_counts_from_one_and_skips_zero() {
        let mut o = Outbound::default();
        assert_eq!((o.next_seq(), o.next_seq()), (1, 2));
        let mut o = Outbound { last: u32::MAX };
        assert_eq!(o.next_seq(), 1);
    }

    #[test]
    fn inbound_window() {
        let mut w = Inbound::default();
        assert!(w.accept(0).is_err());
        assert!(w.accept(5).is_ok());
        assert!(w.accept(5).is_err(), "replay of the highest");
        assert!(w.accept(7).is_ok());
        assert!(w.accept(6).is_ok(), "late but unseen");
        assert!(w.accept(6).is_err(), "replay behind");
        assert!(w.accept(5).is_err(), "older replay");
        assert!(w.accept(7 + WINDOW + 1).is_err(), "too far ahead");
        assert!(w.accept(7 + WINDOW).is_ok());
        assert!(w.accept(7).is_err(), "seen, now far behind");
        assert!(w.accept(8).is_ok(), "unseen, exactly WINDOW - 1 behind");
        assert!(w.accept(6).is_err(), "older than the window");
    }

    #[test]
    fn inbound_window_wraps() {
        let mut w = Inbound::default();
        assert!(w.accept(u32::MAX - 1).is_ok());
        assert!(w.accept(2).is_ok(), "wraps past zero");
        assert!(w.accept(u32::MAX).is_ok(), "late, before the wrap");
        assert!(w.accept(u32::MAX - 1).is_err());
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;
        use std::collections::BTreeSet;

        proptest! {
            /// Against a plain model (a set of what was accepted): a number is accepted
            /// iff it is not zero and either up to WINDOW ahead of the highest, or up to
            /// WINDOW behind it and never accepted before. So nothing is accepted twice.
            #[test]
            fn the_window_matches_its_model(base: u32, offsets in proptest::collection::vec(0u32..48, 1..80)) {
                let mut window = Inbound::default();
                let mut accepted = BTreeSet::new();
                let mut highest = 0u32;
                for off in offsets {
                    let seq = base.wrapping_add(off);
                    let ahead = seq.wrapping_sub(highest);
                    let behind = highest.wrapping_sub(seq);
                    let expected = seq != 0
                        && (highest == 0
                            || (1..=WINDOW).contains(&ahead)
                            || ((1..=WINDOW).contains(&behind) && !accepted.contains(&seq)));
                    let got = window.accept(seq).is_ok();
                    prop_assert_eq!(got, expected, "seq {} with highest {}", seq, highest);
                    if got {
                        prop_assert!(accepted.insert(seq), "{} accepted twice", seq);
                        if highest == 0 || (1..=WINDOW).contains(&ahead) {
                            highest = seq;
                        }
                    }
                }
            }
        }
    }
}
