//! Injected misbehaviour: the ways real BMCs and networks fail that an IPMI fencing
//! client must survive without ever mistaking a lie or a garbled answer for "off".
//!
//! UDP loss (random or the next N datagrams), lost replies (the command still ran;
//! all replies or those to one command), slowness, a BMC impostor whose RAKP 2 does not verify, a power state that lies, a
//! Chassis Control that is acknowledged and ignored, completion-code injection, a
//! cipher suite that is listed but refused, an unanswered Get Channel Cipher Suites,
//! and garbled session replies.
//!
//! JSON form (admin API): serde's externally tagged enum in snake_case, e.g.
//! `{"loss":{"percent":30}}`, `{"drop_replies":{"count":1}}`,
//! `{"drop_replies_to":{"net_fn":0,"cmd":2,"count":1}}`, `{"slow":"500ms"}`,
//! `"lying_power_state"`, `{"completion_code":{"net_fn":0,"cmd":1,"code":192}}`,
//! `{"refuse_suite":{"suite":17}}`, `{"garbled_replies":"bad_auth_code"}`.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::sessions::random;

/// How [`Fault::GarbledReplies`] spoils a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Garble {
    /// Random bytes of the same length.
    RandomBytes,
    /// The first half of the datagram only.
    Truncated,
    /// The last byte of the AuthCode flipped.
    BadAuthCode,
}

/// A misbehaviour to inject with
/// [`MockIpmiHandle::set_fault`](super::MockIpmiHandle::set_fault). Setting a kind
/// again replaces its previous setting ([`Fault::CompletionCode`] per command,
/// [`Fault::RefuseSuite`] per suite); different kinds combine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// Each incoming datagram is dropped with this probability (percent, 0–100).
    Loss { percent: u8 },
    /// The next `count` incoming datagrams are dropped unread.
    DropIncoming { count: u32 },
    /// Requests are processed (commands execute) but the replies are not sent: the
    /// next `count` replies, or every reply when `count` is absent.
    DropReplies {
        #[serde(default)]
        count: Option<u32>,
    },
    /// Replies to this command are not sent (the command still executes): the next
    /// `count` of them, or all of them when `count` is absent. A client that
    /// retransmits makes the command execute again.
    DropRepliesTo {
        net_fn: u8,
        cmd: u8,
        #[serde(default)]
        count: Option<u32>,
    },
    /// Every reply is sent this much later.
    Slow(#[serde(with = "humantime_text")] Duration),
    /// RAKP 2 carries a key exchange auth code computed with the wrong key, as an
    /// impostor that does not know the password would send.
    ImpostorRakp2,
    /// Get Chassis Status reports the opposite of the real power state.
    LyingPowerState,
    /// Chassis Control is answered with completion code 0 and nothing happens (it is
    /// in the request log, not in the control log).
    IgnoreChassisControl,
    /// Requests for this command are answered with `code` and not executed: the next
    /// `count` of them, or all of them when `count` is absent.
    CompletionCode {
        net_fn: u8,
        cmd: u8,
        code: u8,
        #[serde(default)]
        count: Option<u32>,
    },
    /// Open Session proposing this cipher suite is refused (status 0x11, no matching
    /// cipher suite) although Get Channel Cipher Suites lists it.
    RefuseSuite { suite: u8 },
    /// Get Channel Cipher Suites gets no answer (the request is still logged).
    NoCipherSuitesReply,
    /// Replies to in-session requests are spoiled this way (the command still ran).
    GarbledReplies(Garble),
}

/// Serde for `Duration` as a humantime string (`"1500ms"`, `"2s"`).
mod humantime_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let raw = String::deserialize(d)?;
        humantime::parse_duration(&raw).map_err(serde::de::Error::custom)
    }
}

/// Per-command settings: (net_fn, cmd, value, remaining count or `None` = forever).
#[derive(Debug)]
struct PerCommand<T>(Vec<(u8, u8, T, Option<u32>)>);

impl<T> Default for PerCommand<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: Copy> PerCommand<T> {
    fn set(&mut self, net_fn: u8, cmd: u8, value: T, count: Option<u32>) {
        self.0.retain(|c| (c.0, c.1) != (net_fn, cmd));
        if count != Some(0) {
            self.0.push((net_fn, cmd, value, count));
        }
    }

    /// The value for this command, consuming one use.
    fn take(&mut self, net_fn: u8, cmd: u8) -> Option<T> {
        let i = self.0.iter().position(|c| (c.0, c.1) == (net_fn, cmd))?;
        let entry = self.0.get_mut(i)?;
        let value = entry.2;
        if let Some(left) = entry.3.as_mut() {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.0.remove(i);
            }
        }
        Some(value)
    }
}

/// The faults in force.
#[derive(Debug, Default)]
pub(crate) struct FaultSet {
    loss_percent: u8,
    drop_incoming: u32,
    drop_replies_all: bool,
    drop_replies: u32,
    drop_to: PerCommand<()>,
    pub(crate) slow: Option<Duration>,
    pub(crate) impostor: bool,
    pub(crate) lying: bool,
    pub(crate) ignore_control: bool,
    codes: PerCommand<u8>,
    refused: BTreeSet<u8>,
    pub(crate) no_cipher_suites: bool,
    pub(crate) garble: Option<Garble>,
}

impl FaultSet {
    pub(crate) fn insert(&mut self, fault: Fault) {
        match fault {
            Fault::Loss { percent } => self.loss_percent = percent.min(100),
            Fault::DropIncoming { count } => self.drop_incoming = count,
            Fault::DropReplies { count: None } => self.drop_replies_all = true,
            Fault::DropReplies { count: Some(n) } => {
                self.drop_replies_all = false;
                self.drop_replies = n;
            }
            Fault::DropRepliesTo { net_fn, cmd, count } => {
                self.drop_to.set(net_fn, cmd, (), count);
            }
            Fault::Slow(d) => self.slow = Some(d),
            Fault::ImpostorRakp2 => self.impostor = true,
            Fault::LyingPowerState => self.lying = true,
            Fault::IgnoreChassisControl => self.ignore_control = true,
            Fault::CompletionCode {
                net_fn,
                cmd,
                code,
                count,
            } => self.codes.set(net_fn, cmd, code, count),
            Fault::RefuseSuite { suite } => {
                self.refused.insert(suite);
            }
            Fault::NoCipherSuitesReply => self.no_cipher_suites = true,
            Fault::GarbledReplies(g) => self.garble = Some(g),
        }
    }

    /// The faults in force, as they would be set (counts are what is left).
    pub(crate) fn active(&self) -> Vec<Fault> {
        let mut out = Vec::new();
        if self.loss_percent > 0 {
            out.push(Fault::Loss {
                percent: self.loss_percent,
            });
        }
        if self.drop_incoming > 0 {
            out.push(Fault::DropIncoming {
                count: self.drop_incoming,
            });
        }
        if self.drop_replies_all {
            out.push(Fault::DropReplies { count: None });
        } else if self.drop_replies > 0 {
            out.push(Fault::DropReplies {
                count: Some(self.drop_replies),
            });
        }
        out.extend(
            self.drop_to
                .0
                .iter()
                .map(|&(net_fn, cmd, (), count)| Fault::DropRepliesTo { net_fn, cmd, count }),
        );
        if let Some(d) = self.slow {
            out.push(Fault::Slow(d));
        }
        let flags = [
            (self.impostor, Fault::ImpostorRakp2),
            (self.lying, Fault::LyingPowerState),
            (self.ignore_control, Fault::IgnoreChassisControl),
        ];
        out.extend(flags.into_iter().filter(|(on, _)| *on).map(|(_, f)| f));
        out.extend(
            self.codes
                .0
                .iter()
                .map(|&(net_fn, cmd, code, count)| Fault::CompletionCode {
                    net_fn,
                    cmd,
                    code,
                    count,
                }),
        );
        out.extend(
            self.refused
                .iter()
                .map(|&suite| Fault::RefuseSuite { suite }),
        );
        if self.no_cipher_suites {
            out.push(Fault::NoCipherSuitesReply);
        }
        if let Some(g) = self.garble {
            out.push(Fault::GarbledReplies(g));
        }
        out
    }

    /// Whether to drop this incoming datagram (consumes a count).
    pub(crate) fn take_incoming_drop(&mut self) -> bool {
        if self.drop_incoming > 0 {
            self.drop_incoming -= 1;
            return true;
        }
        self.loss_percent > 0
            && random::<2>()
                .map(|b| u16::from_le_bytes(b) % 100 < u16::from(self.loss_percent))
                .unwrap_or(false)
    }

    /// Whether to suppress this reply (consumes a count); `command` is the request's
    /// (net_fn, cmd) for replies to IPMI messages.
    pub(crate) fn take_reply_drop(&mut self, command: Option<(u8, u8)>) -> bool {
        if let Some((net_fn, cmd)) = command
            && self.drop_to.take(net_fn, cmd).is_some()
        {
            return true;
        }
        if self.drop_replies_all {
            return true;
        }
        if self.drop_replies > 0 {
            self.drop_replies -= 1;
            return true;
        }
        false
    }

    /// The completion code to answer this command with instead of executing it.
    pub(crate) fn take_completion_code(&mut self, net_fn: u8, cmd: u8) -> Option<u8> {
        self.codes.take(net_fn, cmd)
    }

    pub(crate) fn refuses(&self, suite: u8) -> bool {
        self.refused.contains(&suite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_json_shapes() {
        let cases = [
            (r#"{"loss":{"percent":30}}"#, Fault::Loss { percent: 30 }),
            (
                r#"{"drop_incoming":{"count":2}}"#,
                Fault::DropIncoming { count: 2 },
            ),
            (
                r#"{"drop_replies":{"count":1}}"#,
                Fault::DropReplies { count: Some(1) },
            ),
            (r#"{"drop_replies":{}}"#, Fault::DropReplies { count: None }),
            (
                r#"{"drop_replies_to":{"net_fn":0,"cmd":2,"count":1}}"#,
                Fault::DropRepliesTo {
                    net_fn: 0,
                    cmd: 2,
                    count: Some(1),
                },
            ),
            (
                r#"{"slow":"500ms"}"#,
                Fault::Slow(Duration::from_millis(500)),
            ),
            (r#""impostor_rakp2""#, Fault::ImpostorRakp2),
            (r#""lying_power_state""#, Fault::LyingPowerState),
            (r#""ignore_chassis_control""#, Fault::IgnoreChassisControl),
            (
                r#"{"completion_code":{"net_fn":0,"cmd":1,"code":192}}"#,
                Fault::CompletionCode {
                    net_fn: 0,
                    cmd: 1,
                    code: 0xC0,
                    count: None,
                },
            ),
            (
                r#"{"refuse_suite":{"suite":17}}"#,
                Fault::RefuseSuite { suite: 17 },
            ),
            (r#""no_cipher_suites_reply""#, Fault::NoCipherSuitesReply),
            (
                r#"{"garbled_replies":"bad_auth_code"}"#,
                Fault::GarbledReplies(Garble::BadAuthCode),
            ),
        ];
        for (json, want) in cases {
            let got: Result<Fault, _> = serde_json::from_str(json);
            assert_eq!(got.ok(), Some(want.clone()), "{json}");
            let back = serde_json::to_string(&want).unwrap_or_default();
            assert_eq!(
                serde_json::from_str::<Fault>(&back).ok(),
                Some(want),
                "{back}"
            );
        }
    }

    #[test]
    fn counts_run_out_and_kinds_replace() {
        let mut set = FaultSet::default();
        set.insert(Fault::DropIncoming { count: 1 });
        assert!(set.take_incoming_drop());
        assert!(!set.take_incoming_drop());
        set.insert(Fault::CompletionCode {
            net_fn: 0,
            cmd: 1,
            code: 0xC0,
            count: Some(2),
        });
        set.insert(Fault::RefuseSuite { suite: 3 });
        set.insert(Fault::RefuseSuite { suite: 17 });
        assert_eq!(set.take_completion_code(0, 1), Some(0xC0));
        assert_eq!(set.take_completion_code(0, 2), None);
        assert_eq!(
            set.active(),
            vec![
                Fault::CompletionCode {
                    net_fn: 0,
                    cmd: 1,
                    code: 0xC0,
                    count: Some(1)
                },
                Fault::RefuseSuite { suite: 3 },
                Fault::RefuseSuite { suite: 17 },
            ]
        );
        assert_eq!(set.take_completion_code(0, 1), Some(0xC0));
        assert_eq!(set.take_completion_code(0, 1), None);
        set.insert(Fault::DropReplies { count: None });
        set.insert(Fault::DropReplies { count: Some(1) });
        assert!(set.take_reply_drop(None));
        assert!(!set.take_reply_drop(None));
        set.insert(Fault::DropRepliesTo {
            net_fn: 0,
            cmd: 2,
            count: Some(1),
        });
        assert!(!set.take_reply_drop(Some((0, 1))));
        assert!(set.take_reply_drop(Some((0, 2))));
        assert!(!set.take_reply_drop(Some((0, 2))));
        set.insert(Fault::Loss { percent: 100 });
        assert!(set.take_incoming_drop());
    }
}
