//! What nodefence tells Prometheus and the kubelet: metrics, readiness and liveness.
//!
//! - [`Metrics`] owns the Prometheus registry; the daemon shares one `Arc<Metrics>`
//!   between the control loop, the executor and the BMC monitor, and records into it
//!   with plain method calls (no label juggling at call sites).
//! - [`Health`] is the readiness/liveness state the daemon flips.
//! - [`serve`] exposes `/healthz` and `/readyz` ([`health_routes`], plain HTTP, open)
//!   and `/metrics` ([`metrics_routes`], HTTPS, each scrape's token authenticated and
//!   authorized by the API server: [`access`]; its certificate: [`certificate`]).
//!
//! # The metrics, and the alert to write on each
//!
//! Every name is prefixed `nodefence_`. Durations are seconds, counters end in
//! `_total`. Label values come from small fixed sets; node names appear only in
//! `nodefence_bmc_monitor_failures`, `nodefence_bmc_identity` and
//! `nodefence_power_level_failures` and `nodefence_companion_silent`, whose size is
//! the inventory's.
//!
//! | metric | type | labels | what it means at 3 a.m. |
//! |---|---|---|---|
//! | `nodefence_nodes` | gauge | `phase` = `healthy` \| `incident` \| `released` | Nodes per engine phase. `incident` > 0 for long (`nodefence_nodes{phase="incident"} > 0 for 15m`) means a dead node whose machine is **not yet proven off**: its volumes are still held, read the node's Events (`FenceBlocked`, `PowerQueryFailed`). `released` > 0 for hours: a machine was fenced and never came back; go repair it. |
//! | `nodefence_nodes_not_in_inventory` | gauge | | Cluster nodes with no inventory entry: nodefence cannot fence them. Alert on `> 0` (ticket, not page): the inventory is behind the cluster. |
//! | `nodefence_power_queries_total` | counter | `driver`, `result` = `on` \| `off` \| `other` \| `error_unreachable` \| `error_auth` \| `error_protocol` \| `error_unsupported` \| `error_config` \| `error_identity` \| `error_refused` | Every power-state reading and its outcome. Alert on the error ratio per driver (`sum by (driver) (rate(nodefence_power_queries_total{result=~"error_.*"}[10m])) / sum by (driver) (rate(nodefence_power_queries_total[10m])) > 0.5`); `error_auth` means a rotated BMC password, `error_unreachable` a management network or BMC down. |
//! | `nodefence_power_query_duration_seconds` | histogram | `driver` | BMC response time (buckets 50 ms … 30 s). A p99 creeping to the request timeout predicts `error_unreachable`. |
//! | `nodefence_power_commands_total` | counter | `driver`, `action` = `off` \| `on`, `result` = `ok` \| `error` \| `refused` | Power commands sent (and accepted by the BMC, `ok`; never the proof), or `refused`: not sent because the machine read just before it was not proven to be the node's own or could not be read. Any `action="off"` with `result="error"` or `"refused"` deserves a page: a dead node cannot be fenced. |
//! | `nodefence_releases_total` | counter | `mode` = `out-of-service-taint` \| `delete-node` \| `untaint`, `proof` = `off-readings` \| `watchdog` \| `none` (untaint), `result` = `ok` \| `refused` \| `conflict` \| `api_error` | Volume releases (and taint removals), by what each rested on: Off readings, or the watchdog level's proof that the node's own hardware watchdog reset it. `ok` on a healthy day is rare: alert on `increase(...{result="ok", mode!="untaint"}[1h]) > 0` as information, on `api_error` as a page (the API server refuses our writes). `refused` means a safety check stopped a release (the node came back): expected now and then. |
//! | `nodefence_proof_contradicted_total` | counter | `proof` = `off-readings` \| `watchdog` | Released nodes that came back with the boot their release ended: the machine never went down, the release was false (`engine::returned`). Counted by the leader that saw the return; never expected: page on `increase(...[24h]) > 0` (`NodefenceProofContradicted`). |
//! | `nodefence_watchdog_unarmed` | gauge | `node` | 1 for each node whose policy has the watchdog level and whose companion is not beating with an armed hardware watchdog (the leader's view; absent otherwise). Alert `NodefenceWatchdogNotArmed` after 10 minutes. |
//! | `nodefence_watchdog_marks_total` | counter | `result` = `ok` \| `refused` | Fencing marks of the watchdog level (a node none of whose power methods can be read, told to stop feeding its hardware watchdog). `refused`: not written (no companion with an armed watchdog, the API server): alert on `increase(...{result="refused"}[15m]) > 0`, a node configured for the level cannot use it. |
//! | `nodefence_unhealthy_to_release_seconds` | histogram | | From the node's last sign of life to its volumes released (buckets 1 s … 15 min): the outage the workloads saw. Its p90 going up means BMCs are slow or the policy waits longer than intended. |
//! | `nodefence_release_step_seconds` | histogram | `step` | Per released node, when each step came after its last sign of life (as nodefence saw it fail): `detected`, `first_reading`, `power_off_sent` (only when nodefence sent one), `fencing_marked` (the watchdog level's mark, when written), `off_proven` (or proven reset), `released`. Which step is slow on this hardware: `detected` is the Lease timing, `first_reading` − `detected` the BMC, `off_proven` − `first_reading` the proof (`confirm_readings` × `confirm_interval`), `released` − `off_proven` the API server. |
//! | `nodefence_notices_total` | counter | `reason` (the Event reason, e.g. `PowerQueryFailed`, `FenceBlocked`), `type` = `Normal` \| `Warning` | One per Event nodefence raises. `increase(nodefence_notices_total{type="Warning"}[15m]) > 0` is the catch-all "read `kubectl get events --field-selector source=nodefence`". |
//! | `nodefence_storm_protection_active` | gauge 0/1 | | Too many nodes unhealthy at once: nodefence suspects a partition and sends no power-off. Page on `== 1`: a human decides whether the cluster or the control plane is broken. |
//! | `nodefence_is_leader` | gauge 0/1 | | This replica holds the Lease. Alert on `sum(nodefence_is_leader) != 1 for 5m`: no leader means nobody fences. |
//! | `nodefence_paused` | gauge 0/1 | | Fencing paused by an operator. Alert on `== 1 for 4h`: a maintenance pause that was forgotten. |
//! | `nodefence_bmc_monitor_failures` | gauge 0/1 | `node`, `driver` | The background BMC check cannot read this node's power state. Alert on `== 1 for 30m`: when this node dies it cannot be fenced; fix the BMC or its credentials now, not during the outage. |
//! | `nodefence_power_level_failures` | gauge 0/1 | `node`, `level` (`1` = the primary method, `2`... its fallbacks, in order), `driver` | Only for nodes with `fallback` methods: this one method failed its last background check (the node's Event `PowerLevelFailed` names it, its endpoint and the error). Alert on `== 1 for 30m` (ticket): the node can still be fenced through another level while `nodefence_bmc_monitor_failures` is 0, but it has lost its redundancy; a dead fallback would only show during the outage it exists for. |
//! | `nodefence_bmc_identity` | gauge 0/1 | `node`, `result` (`match`, `mismatch`, `unknown`) | 1 on the current result of the BMC identity cross-check. Alert on `result="mismatch" == 1` at once: the inventory maps the node to another machine's BMC and nodefence will never fence it; fix the inventory. `unknown` with `require_identity` blocks fencing too. |
//! | `nodefence_companions` | gauge | `state` = `beating` \| `silent` \| `stopped` | Nodes' companions (`nodefence companion`, with `--companion-listen`). `silent`: was beating, has not for `--heartbeat-timeout` (its node is suspect; a dead node's companion stays silent). Nodes without a beating companion: `sum(max without (instance) (nodefence_nodes)) - max(nodefence_companions{state="beating"})` (ticket when > 0 for 30m where the DaemonSet should run everywhere). |
//! | `nodefence_companion_watchdogs` | gauge | `state` = `armed` \| `none` | Beating companions with an armed hardware watchdog, or none (no device, softdog refused). Watch `none` > 0 where every node should have one. |
//! | `nodefence_companion_oldest_beat_age_seconds` | gauge | | The oldest last beat among beating companions: near `--heartbeat-timeout` means beats are being lost (the network, an overloaded replica). |
//! | `nodefence_companion_datagrams_refused_total` | counter | `reason` = `not-a-beat` \| `no-session` \| `seal` \| `session` \| `replayed` \| `unknown` | Datagrams at the heartbeat port that got nothing back. `no-session` after a replica restart is normal (companions say hello again); `seal` or `replayed` growing: someone sends forged or replayed beats. |
//! | `nodefence_companion_silent` | gauge 1 | `node` | Present while the node's companion is silent. A live node (its Lease renewed) with a silent companion: the companion crashed, or cannot reach nodefence (NetworkPolicy, the certificate). |
//! | `nodefence_metrics_scrapes_refused_total` | counter | `reason` = `unauthenticated` \| `forbidden` \| `review_failed` | Scrapes of `/metrics` refused: no token or one the API server does not know, a user not bound to `nodefence-metrics-reader`, or the API server not answering the review. Only refused scrapes are counted here, so an alert needs the scraper that *is* allowed to see it: a Prometheus refused with `forbidden` shows as `up == 0` on its own side. |
//! | `nodefence_build_info` | info | `version` | 1; for dashboards and for spotting mixed versions during rollouts. |
//!
//! Label values outside a metric's documented set are recorded as `unknown` (and
//! logged): a typo at a call site never turns into a new time series per call.

pub mod access;
pub mod certificate;
mod exposition;
mod metrics;
mod server;

pub use exposition::{Sample, parse_samples};
pub use metrics::companions::CompanionSummary;
pub use metrics::{Metrics, power_error_result, power_query_result, release_mode_label};
pub use server::{Health, METRICS_CONTENT_TYPE, health_routes, metrics_routes, serve};
