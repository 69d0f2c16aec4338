//! RMCP+ session set-up, the console side of IPMI v2.0 §13.15–13.20.
//!
//! Get Channel Authentication Capabilities (IPMI v1.5 framing: is v2.0 offered, is a
//! BMC key set), Open Session (one cipher suite proposal per request; a refused or
//! unanswered proposal is followed by a new Open Session with the next suite), RAKP
//! 1–4 (the BMC proves it knows the password in RAKP 2, and the BMC key K_g in RAKP
//! 4), then Set Session Privilege Level. Set-up messages are not authenticated, so a
//! reply counts only with our tag and session id in it; the RAKP codes then prove
//! who sent it.

use nodefence_ipmi_proto::command::{self, ChannelAuthCapabilities, Privilege};
use nodefence_ipmi_proto::crypto::{CipherSuite, Credentials, RakpContext};
use nodefence_ipmi_proto::message::IpmiMessage;
use nodefence_ipmi_proto::rakp::{self, OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2};
use nodefence_ipmi_proto::rakp::{Rakp2Accepted, Rakp3, Rakp4};
use nodefence_ipmi_proto::rmcp::{self, Packet, PayloadType, V2Header};

use super::request::{refuses_suite, rmcp_status_text, status_error};
use super::session::{Session, answers, codec_error, random, random_id};
use super::transport::{ExchangeError, Plan, Transport, Verdict};
use crate::power::PowerError;

/// Who logs in, and how.
pub(crate) struct Login<'a> {
    pub creds: &'a Credentials,
    pub username: &'a str,
    pub privilege: Privilege,
    /// Suites to propose, in order (the first that the BMC accepts is used).
    pub suites: &'a [CipherSuite],
    pub kg_configured: bool,
}

/// The payload of an unauthenticated RMCP+ packet of type `want` (set-up messages).
fn plain_payload(datagram: &[u8], want: PayloadType) -> Result<&[u8], String> {
    match rmcp::split(datagram) {
        Ok(Packet::V2 {
            header, payload, ..
        }) if header.payload_type == want && !header.authenticated && !header.encrypted => {
            Ok(payload)
        }
        Ok(Packet::V2 { header, .. }) => Err(format!(
            "RMCP+ payload {:?} (authenticated {}, encrypted {}), waiting for {want:?}",
            header.payload_type, header.authenticated, header.encrypted
        )),
        Ok(Packet::V15 { .. }) => Err(format!("IPMI v1.5 packet, waiting for {want:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Get Channel Authentication Capabilities, outside a session (v1.5 framing).
async fn capabilities(
    t: &mut Transport,
    privilege: Privilege,
    plan: Plan,
) -> Result<ChannelAuthCapabilities, PowerError> {
    let rq = random::<1>()?[0] & 0x3F;
    let request = command::get_channel_auth_capabilities(rq, privilege);
    let datagram =
        rmcp::encode_v15(0, 0, &request.encode().map_err(codec_error)?).map_err(codec_error)?;
    let judge = |_: &mut (), d: &[u8]| {
        let message = match rmcp::split(d) {
            Ok(Packet::V15 { message, .. }) => message,
            Ok(Packet::V2 { .. }) => {
                return Verdict::Discard("RMCP+ packet, waiting for v1.5".into());
            }
            Err(e) => return Verdict::Discard(e.to_string()),
        };
        let reply = match IpmiMessage::decode(message) {
            Ok(r) => r,
            Err(e) => return Verdict::Discard(e.to_string()),
        };
        if let Err(why) = answers(&reply, &request) {
            return Verdict::Discard(why);
        }
        match command::split_completion(&reply.data) {
            Ok((0, data)) => match ChannelAuthCapabilities::decode(data) {
                Ok(caps) => Verdict::Accept(caps),
                Err(e) => Verdict::Fail(PowerError::protocol(format!(
                    "malformed Get Channel Authentication Capabilities reply: {e}"
                ))),
            },
            Ok((cc, _)) => Verdict::Fail(PowerError::protocol(format!(
                "Get Channel Authentication Capabilities at {} privilege: completion code 0x{cc:02x} ({}); the channel may not allow that privilege",
                privilege.name(),
                command::completion_code_text(cc)
            ))),
            Err(e) => Verdict::Fail(PowerError::protocol(e.to_string())),
        }
    };
    t.exchange(&mut (), |_| Ok(datagram.clone()), judge, plan)
        .await
        .map_err(|e| e.into_power_error("Get Channel Authentication Capabilities"))
}

/// How one Open Session proposal ended.
enum Opened {
    Accepted { bmc_id: u32, suite: CipherSuite },
    Refused(u8),
}

async fn open_session(
    t: &mut Transport,
    login: &Login<'_>,
    suite: CipherSuite,
    console_id: u32,
    tag: u8,
    plan: Plan,
) -> Result<Opened, ExchangeError> {
    let request = OpenSessionRequest {
        tag,
        max_privilege: login.privilege as u8,
        console_session_id: console_id,
        algorithms: suite.algorithms(),
    };
    let datagram = rmcp::encode_v2_plain(
        &V2Header::pre_session(PayloadType::OpenSessionRequest),
        &request.encode(),
    )
    .map_err(|e| ExchangeError::Failed(codec_error(e)))?;
    let judge = |_: &mut (), d: &[u8]| {
        let payload = match plain_payload(d, PayloadType::OpenSessionResponse) {
            Ok(p) => p,
            Err(why) => return Verdict::Discard(why),
        };
        match payload {
            [first, ..] if *first != tag => {
                return Verdict::Discard("Open Session Response for another tag".into());
            }
            // Some BMCs (OpenIPMI) cut a refusal to tag and status.
            [_, status, rest @ ..] if *status != rakp::STATUS_OK => {
                if rest.len() >= 6 && rest.get(2..6) != Some(&console_id.to_le_bytes()[..]) {
                    return Verdict::Discard("Open Session Response for another session".into());
                }
                return Verdict::Accept(Opened::Refused(*status));
            }
            _ => {}
        }
        let response = match OpenSessionResponse::decode(payload) {
            Ok(r) => r,
            Err(e) => {
                return Verdict::Fail(PowerError::protocol(format!(
                    "malformed Open Session Response: {e}"
                )));
            }
        };
        if response.console_session_id != console_id {
            return Verdict::Discard("Open Session Response for another session".into());
        }
        let Some(accepted) = response.accepted else {
            return Verdict::Fail(PowerError::protocol(
                "Open Session Response without a session",
            ));
        };
        if accepted.bmc_session_id == 0 {
            return Verdict::Fail(PowerError::protocol(
                "the BMC opened a session with the reserved id 0",
            ));
        }
        match CipherSuite::from_algorithms(accepted.algorithms) {
            Ok(chosen) if login.suites.contains(&chosen) => Verdict::Accept(Opened::Accepted {
                bmc_id: accepted.bmc_session_id,
                suite: chosen,
            }),
            Ok(chosen) => Verdict::Fail(PowerError::unsupported(format!(
                "asked for cipher suite {}, the BMC chose suite {} instead, which is not the configured cipher_suite; set cipher_suite = {} or leave it unset",
                suite.id(),
                chosen.id(),
                chosen.id()
            ))),
            Err(e) => Verdict::Fail(PowerError::unsupported(format!(
                "asked for cipher suite {}, the BMC chose other algorithms: {e}",
                suite.id()
            ))),
        }
    };
    t.exchange(&mut (), |_| Ok(datagram.clone()), judge, plan)
        .await
}

/// Sets up a session: capabilities, Open Session (with suite fallback), RAKP 1–4,
/// Set Session Privilege Level. Returns it with the suite that was used.
pub(crate) async fn establish(
    t: &mut Transport,
    login: &Login<'_>,
    plan: Plan,
) -> Result<(Session, CipherSuite), PowerError> {
    let caps = capabilities(t, login.privilege, plan).await?;
    if !caps.ipmi_v2 {
        return Err(PowerError::unsupported(
            "the BMC does not offer IPMI v2.0 (RMCP+) on this channel; enable IPMI over LAN v2.0 in its settings",
        ));
    }
    if caps.kg_set && !login.kg_configured {
        return Err(PowerError::auth(
            "the BMC has a BMC key (K_g) set and none is configured for this node; configure the BMC's K_g",
        ));
    }
    let mut tag = random::<1>()?[0];
    let mut refusals = Vec::new();
    let (mut i, mut started_over) = (0, false);
    while let Some(&proposal) = login.suites.get(i) {
        let last = i + 1 == login.suites.len();
        let console_id = random_id()?;
        tag = tag.wrapping_add(1);
        match open_session(t, login, proposal, console_id, tag, plan).await {
            Ok(Opened::Accepted { bmc_id, suite }) => {
                if suite != proposal {
                    tracing::debug!(
                        proposed = proposal.id(),
                        chosen = suite.id(),
                        "BMC chose another cipher suite"
                    );
                }
                match authenticate(t, login, suite, console_id, bmc_id, tag, plan).await {
                    Ok(session) => return Ok((session, suite)),
                    // A lost message, or a resent RAKP 1 that the BMC answered with a
                    // new random number: one more try, from Open Session.
                    Err(f) if f.lost && !started_over => {
                        tracing::debug!(error = %f.error, "IPMI session set-up lost a message; starting over");
                        started_over = true;
                    }
                    Err(f) => return Err(f.error),
                }
            }
            Ok(Opened::Refused(status)) if refuses_suite(status) && !last => {
                tracing::debug!(
                    suite = proposal.id(),
                    status,
                    "BMC refused cipher suite; trying the next"
                );
                refusals.push(format!("{} (status 0x{status:02x})", proposal.id()));
                i += 1;
            }
            Ok(Opened::Refused(status)) if refuses_suite(status) => {
                refusals.push(format!("{} (status 0x{status:02x})", proposal.id()));
                let hint = if login.suites.len() == 1 {
                    "set cipher_suite to one the BMC accepts, or leave it unset to try 17, then 3"
                } else {
                    "nodefence needs suite 17 or 3 (HMAC-SHA256 or HMAC-SHA1 with AES-CBC-128); enable one on the BMC"
                };
                return Err(PowerError::unsupported(format!(
                    "the BMC refused cipher suite{} {}: {}; {hint}",
                    if refusals.len() == 1 { "" } else { "s" },
                    refusals.join(", "),
                    rmcp_status_text(status)
                )));
            }
            Ok(Opened::Refused(status)) => {
                return Err(status_error(
                    "Open Session",
                    status,
                    login.username,
                    login.privilege,
                ));
            }
            Err(ExchangeError::NoAnswer { .. }) if !last => {
                tracing::debug!(
                    suite = proposal.id(),
                    "no answer to Open Session; trying the next suite"
                );
                refusals.push(format!("{} (no answer)", proposal.id()));
                i += 1;
            }
            Err(e) => {
                return Err(
                    e.into_power_error(&format!("Open Session (cipher suite {})", proposal.id()))
                );
            }
        }
    }
    Err(PowerError::config("no cipher suite to propose"))
}

/// Why authentication stopped; `lost` when a message got no answer.
struct AuthFailure {
    error: PowerError,
    lost: bool,
}

impl From<PowerError> for AuthFailure {
    fn from(error: PowerError) -> Self {
        Self { error, lost: false }
    }
}

impl AuthFailure {
    fn exchange(e: ExchangeError, what: &str) -> Self {
        let lost = matches!(e, ExchangeError::NoAnswer { .. });
        Self {
            error: e.into_power_error(what),
            lost,
        }
    }
}

/// RAKP 1–4 and Set Session Privilege Level in a session the BMC has opened.
async fn authenticate(
    t: &mut Transport,
    login: &Login<'_>,
    suite: CipherSuite,
    console_id: u32,
    bmc_id: u32,
    tag: u8,
    plan: Plan,
) -> Result<Session, AuthFailure> {
    let role = login.privilege as u8 | 0x10;
    let console_random = random::<16>()?;
    let rakp1 = Rakp1 {
        tag: tag.wrapping_add(1),
        bmc_session_id: bmc_id,
        console_random,
        role,
        username: login.creds.username().to_vec(),
    };
    let datagram = rmcp::encode_v2_plain(
        &V2Header::pre_session(PayloadType::Rakp1),
        &rakp1.encode().map_err(codec_error)?,
    )
    .map_err(codec_error)?;
    let judge2 = |_: &mut (), d: &[u8]| {
        let payload = match plain_payload(d, PayloadType::Rakp2) {
            Ok(p) => p,
            Err(why) => return Verdict::Discard(why),
        };
        if payload.first() != Some(&rakp1.tag) {
            return Verdict::Discard("RAKP 2 for another tag".into());
        }
        match Rakp2::decode(payload, suite) {
            Ok(r) if r.console_session_id != console_id => {
                Verdict::Discard("RAKP 2 for another session".into())
            }
            Ok(Rakp2 {
                accepted: Some(a), ..
            }) => Verdict::Accept(a),
            Ok(r) => Verdict::Fail(status_error(
                "RAKP 2",
                r.status,
                login.username,
                login.privilege,
            )),
            Err(e) => Verdict::Fail(PowerError::protocol(format!("malformed RAKP 2: {e}"))),
        }
    };
    let accepted: Rakp2Accepted = t
        .exchange(&mut (), |_| Ok(datagram.clone()), judge2, plan)
        .await
        .map_err(|e| {
            let mut f = AuthFailure::exchange(e, "RAKP 1");
            if f.lost {
                f.error.message.push_str(&format!(
                    " (the BMC answered Open Session; some BMCs ignore RAKP 1 for a user name they do not know: check user {:?})",
                    login.username
                ));
            }
            f
        })?;
    let ctx = RakpContext {
        suite,
        console_session_id: console_id,
        bmc_session_id: bmc_id,
        console_random,
        bmc_random: accepted.bmc_random,
        bmc_guid: accepted.bmc_guid,
        role,
    };
    let rakp3_tag = tag.wrapping_add(2);
    if ctx.verify_rakp2(login.creds, &accepted.auth_code).is_err() {
        // Tell the BMC, so it can free the session; best effort.
        let refusal = Rakp3 {
            tag: rakp3_tag,
            status: rakp::STATUS_INVALID_INTEGRITY_CHECK,
            bmc_session_id: bmc_id,
            auth_code: Vec::new(),
        };
        if let Ok(body) = refusal.encode(suite)
            && let Ok(d) = rmcp::encode_v2_plain(&V2Header::pre_session(PayloadType::Rakp3), &body)
        {
            t.send_only(&d, plan.deadline).await;
        }
        return Err(AuthFailure::from(PowerError::auth(format!(
            "RAKP 2 from the BMC does not verify with the configured password: wrong user name or password? (user {:?}, cipher suite {})",
            login.username,
            suite.id()
        ))));
    }
    let keys = ctx.session_keys(login.creds);
    let rakp3 = Rakp3 {
        tag: rakp3_tag,
        status: rakp::STATUS_OK,
        bmc_session_id: bmc_id,
        auth_code: ctx.rakp3_auth_code(login.creds),
    };
    let datagram = rmcp::encode_v2_plain(
        &V2Header::pre_session(PayloadType::Rakp3),
        &rakp3.encode(suite).map_err(codec_error)?,
    )
    .map_err(codec_error)?;
    let kg_configured = login.kg_configured;
    let judge4 = |_: &mut (), d: &[u8]| {
        let payload = match plain_payload(d, PayloadType::Rakp4) {
            Ok(p) => p,
            Err(why) => return Verdict::Discard(why),
        };
        if payload.first() != Some(&rakp3.tag) {
            return Verdict::Discard("RAKP 4 for another tag".into());
        }
        match Rakp4::decode(payload, suite) {
            Ok(r) if r.console_session_id != console_id => {
                Verdict::Discard("RAKP 4 for another session".into())
            }
            Ok(r) if r.status != rakp::STATUS_OK => Verdict::Fail(status_error(
                "RAKP 4",
                r.status,
                login.username,
                login.privilege,
            )),
            Ok(r) => match ctx.verify_rakp4(&keys, &r.icv) {
                Ok(()) => Verdict::Accept(()),
                Err(_) => Verdict::Fail(PowerError::auth(format!(
                    "RAKP 4 from the BMC does not verify: the BMC key K_g differs from the configured one ({}); fix kg for this node",
                    if kg_configured {
                        "one is configured"
                    } else {
                        "none is configured"
                    }
                ))),
            },
            Err(e) => Verdict::Fail(PowerError::protocol(format!("malformed RAKP 4: {e}"))),
        }
    };
    let rakp4 = t
        .exchange(&mut (), |_| Ok(datagram.clone()), judge4, plan)
        .await;
    let mut session = Session::new(keys, console_id, bmc_id)?;
    if let Err(e) = rakp4 {
        if matches!(e, ExchangeError::NoAnswer { .. }) {
            // RAKP 4 may be lost and the session active on the BMC.
            session.abandon(t, plan.deadline).await;
        }
        return Err(AuthFailure::exchange(e, "RAKP 3"));
    }
    match privilege(t, login, &mut session, plan).await {
        Ok(()) => Ok(session),
        Err(f) => {
            session.abandon(t, plan.deadline).await;
            Err(f)
        }
    }
}

/// Set Session Privilege Level to the configured privilege.
async fn privilege(
    t: &mut Transport,
    login: &Login<'_>,
    session: &mut Session,
    plan: Plan,
) -> Result<(), AuthFailure> {
    let want = login.privilege;
    let (cc, data) = session
        .request(t, |rq| command::set_session_privilege(rq, want), plan)
        .await
        .map_err(|e| AuthFailure::exchange(e, "Set Session Privilege Level"))?;
    if cc != command::CC_OK {
        return Err(AuthFailure::from(PowerError::auth(format!(
            "the BMC refused {} privilege for user {:?} (Set Session Privilege Level: completion code 0x{cc:02x}, {}); give the user that privilege for IPMI over LAN, or set privilege = \"operator\"",
            want.name(),
            login.username,
            command::completion_code_text(cc)
        ))));
    }
    match command::decode_session_privilege(&data) {
        Ok(got) if got >= want => Ok(()),
        Ok(got) => Err(AuthFailure::from(PowerError::auth(format!(
            "the BMC granted {} privilege instead of {} for user {:?}",
            got.name(),
            want.name(),
            login.username
        )))),
        Err(e) => Err(AuthFailure::from(PowerError::protocol(format!(
            "malformed Set Session Privilege Level reply: {e}"
        )))),
    }
}
