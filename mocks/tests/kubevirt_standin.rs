//! The KubeVirt stand-in against fake-kube over HTTPS: virt-api's `start`/`stop`
//! subresources through the aggregated-API hook (status codes and messages of
//! `lifecycle.go`, RBAC on `virtualmachines/stop`, discovery), the controller's run
//! strategies and printable statuses, grace periods honoured or cut short, and the
//! failure modes (a lost host, a forced kill KubeVirt undoes under RerunOnFailure, a
//! Failed VMI whose deletion never completes, virt-api down).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube_common::{client, eventually, get_json, http, provider};
use nodefence_mocks::kube::authz::Policy;
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use nodefence_mocks::kubevirt::{
    self, Faults, KubevirtStandIn, RunStrategy, SUBRESOURCES_GROUP, SUBRESOURCES_VERSION, Timing,
    VirtApi, VmBuilder, legacy_firmware_uuid,
};
use nodefence_mocks::remediation::install_crds;
use serde_json::{Value, json};

const NS: &str = "vms";
const WITHIN: Duration = Duration::from_secs(20);
const LIMITED_TOKEN: &str = "limited-token";

/// Phases in 50 ms, a grace-period second in 50 ms (180 s: 9 s), a kill in 100 ms.
fn fast() -> Timing {
    Timing {
        resync: Duration::from_millis(200),
        controller_delay: Duration::ZERO,
        pending: Duration::from_millis(50),
        scheduling: Duration::from_millis(50),
        scheduled: Duration::from_millis(50),
        kill: Duration::from_millis(100),
        grace_second: Duration::from_millis(50),
        host_lost_to_failed: Duration::from_millis(300),
    }
}

struct Env {
    kube: FakeKubeHandle,
    client: Client,
    api: Arc<VirtApi>,
    kv: KubevirtStandIn,
}

/// A ServiceAccount `vms:fencer` that may get VMs and `start` them, but not `stop`.
fn limited_policy() -> Policy {
    let objects = [
        json!({"kind": "Role", "metadata": {"name": "no-stop", "namespace": NS}, "rules": [
            {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines", "virtualmachineinstances"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["subresources.kubevirt.io"], "resources": ["virtualmachines/start"],
             "verbs": ["update"]},
        ]}),
        json!({"kind": "RoleBinding", "metadata": {"name": "no-stop", "namespace": NS},
               "roleRef": {"kind": "Role", "name": "no-stop"},
               "subjects": [{"kind": "ServiceAccount", "name": "fencer", "namespace": NS}]}),
    ];
    Policy::for_service_account(&objects, NS, "fencer")
}

async fn setup(timing: Timing) -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("nodefence_mocks::kubevirt=debug")
        .with_test_writer()
        .try_init();
    provider();
    let api = VirtApi::new();
    let kube = FakeKube::builder()
        .tls(true)
        .aggregated_api(SUBRESOURCES_GROUP, SUBRESOURCES_VERSION, api.clone())
        .identity(
            LIMITED_TOKEN,
            "system:serviceaccount:vms:fencer",
            limited_policy(),
        )
        .start()
        .await
        .unwrap();
    let client = client(&kube).await;
    api.connect(client.clone());
    install_crds(&client, kubevirt::crds()).await.unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let kv = KubevirtStandIn::spawn(client.clone(), NS, timing);
    Env {
        kube,
        client,
        api,
        kv,
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kubevirt.io", "v1", kind), plural)
}

impl Env {
    fn vms(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            NS,
            &resource("VirtualMachine", "virtualmachines"),
        )
    }

    fn vmis(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            NS,
            &resource("VirtualMachineInstance", "virtualmachineinstances"),
        )
    }

    async fn create(&self, vm: VmBuilder) {
        let obj: DynamicObject = serde_json::from_value(vm.build()).unwrap();
        self.vms()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }

    async fn vm(&self, name: &str) -> Value {
        serde_json::to_value(self.vms().get(name).await.unwrap()).unwrap()
    }

    async fn vmi(&self, name: &str) -> Option<Value> {
        self.vmis()
            .get_opt(name)
            .await
            .unwrap()
            .map(|v| serde_json::to_value(v).unwrap())
    }

    /// PUT on a subresource with a token: status and body.
    async fn put_as(
        &self,
        token: &str,
        name: &str,
        action: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!(
            "{}/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/{name}/{action}",
            self.kube.base_url()
        );
        let mut req = http(&self.kube).put(url).bearer_auth(token);
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn put(&self, name: &str, action: &str, body: Option<Value>) -> (u16, Value) {
        self.put_as(&self.kube.token(), name, action, body).await
    }

    async fn printable(&self, name: &str, want: &str) {
        eventually(WITHIN, &format!("{name} {want}"), || async {
            (self.vm(name).await["status"]["printableStatus"] == want).then_some(())
        })
        .await;
    }

    /// Waits until the VM runs; the VMI's UID.
    async fn running(&self, name: &str) -> String {
        self.printable(name, "Running").await;
        eventually(WITHIN, "domain running", || async {
            (self.kv.domain_running(NS, name) == Some(true)).then_some(())
        })
        .await;
        let vmi = self.vmi(name).await.unwrap();
        assert_eq!(vmi["status"]["phase"], "Running");
        vmi["metadata"]["uid"].as_str().unwrap().to_owned()
    }

    async fn gone(&self, name: &str) {
        eventually(WITHIN, &format!("VMI {name} gone"), || async {
            self.vmi(name).await.is_none().then_some(())
        })
        .await;
        eventually(WITHIN, "no domain", || async {
            self.kv.domain_running(NS, name).is_none().then_some(())
        })
        .await;
        self.printable(name, "Stopped").await;
    }
}

fn message(body: &Value) -> &str {
    body["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn discovery_lists_virt_api_and_its_vm_subresources() {
    let env = setup(fast()).await;
    let (code, groups) = get_json(&env.kube, "/apis", None).await;
    assert_eq!(code, 200);
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"subresources.kubevirt.io") && names.contains(&"kubevirt.io"));
    let (code, group) = get_json(&env.kube, "/apis/subresources.kubevirt.io", None).await;
    assert_eq!(
        (code, &group["preferredVersion"]["groupVersion"]),
        (200, &json!("subresources.kubevirt.io/v1"))
    );
    let (code, list) = get_json(&env.kube, "/apis/subresources.kubevirt.io/v1", None).await;
    assert_eq!(code, 200);
    let stop = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "virtualmachines/stop")
        .unwrap();
    assert_eq!(stop["namespaced"], true);
    let (code, agg) = get_json(
        &env.kube,
        "/apis",
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
    )
    .await;
    assert_eq!(code, 200);
    let sub = agg["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "subresources.kubevirt.io")
        .unwrap();
    let vms = sub["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "virtualmachines")
        .unwrap();
    assert!(
        vms["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subresource"] == "stop")
    );
}

#[tokio::test]
async fn always_runs_with_a_persisted_firmware_uuid_and_stop_halts_it() {
    let env = setup(fast()).await;
    env.create(VmBuilder::new(NS, "vm1")).await;
    let uid = env.running("vm1").await;
    let vm = env.vm("vm1").await;
    let expected = legacy_firmware_uuid("vm1");
    assert_eq!(
        vm["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"],
        expected.as_str()
    );
    assert_eq!(vm["status"]["ready"], true);
    assert_eq!(vm["status"]["created"], true);
    assert_eq!(vm["status"]["runStrategy"], "Always");
    let vmi = env.vmi("vm1").await.unwrap();
    assert_eq!(vmi["spec"]["domain"]["firmware"]["uuid"], expected.as_str());
    assert_eq!(
        vmi["metadata"]["ownerReferences"][0]["uid"],
        vm["metadata"]["uid"]
    );
    assert_eq!(vmi["spec"]["terminationGracePeriodSeconds"], 180);

    let (code, body) = env.put("vm1", "start", None).await;
    assert_eq!(
        (code, message(&body)),
        (
            409,
            "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": VM is already running"
        )
    );
    let (code, _) = env
        .put("vm1", "stop", Some(json!({"gracePeriod": 0})))
        .await;
    assert_eq!(code, 202);
    assert_eq!(env.vm("vm1").await["spec"]["runStrategy"], "Halted");
    env.gone("vm1").await;
    let (code, body) = env.put("vm1", "stop", None).await;
    assert_eq!((code, body["reason"].as_str()), (409, Some("Conflict")));
    assert!(message(&body).ends_with("VM is not running"), "{body}");

    let (code, _) = env.put("vm1", "start", None).await;
    assert_eq!(code, 202);
    assert_eq!(env.vm("vm1").await["spec"]["runStrategy"], "Always");
    let again = env.running("vm1").await;
    assert_ne!(again, uid, "a new VMI");
    let (code, body) = env.put("vm1", "start", Some(json!({}))).await;
    assert_eq!(code, 409, "{body}");
    let (code, body) = env.put("missing", "stop", None).await;
    assert_eq!(
        (code, message(&body)),
        (404, "virtualmachine.kubevirt.io \"missing\" not found")
    );
}

#[tokio::test]
async fn a_graceful_stop_takes_the_grace_period_and_a_forced_one_cuts_it_short() {
    let env = setup(fast()).await;
    env.create(VmBuilder::new(NS, "slow")).await;
    env.running("slow").await;
    let (code, _) = env.put("slow", "stop", None).await;
    assert_eq!(code, 202);
    env.printable("slow", "Stopping").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        env.kv.domain_running(NS, "slow"),
        Some(true),
        "180 s of grace (9 s here)"
    );
    // Halted now: only a shorter grace period is accepted.
    let (code, body) = env
        .put("slow", "stop", Some(json!({"gracePeriod": 200})))
        .await;
    assert_eq!(code, 409);
    assert!(
        message(&body)
            .ends_with("Halted only supports manual stop requests with a shorter graceperiod"),
        "{body}"
    );
    let started = tokio::time::Instant::now();
    let (code, _) = env
        .put("slow", "stop", Some(json!({"gracePeriod": 0})))
        .await;
    assert_eq!(code, 202);
    env.gone("slow").await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn manual_and_rerun_on_failure_go_through_state_change_requests() {
    let env = setup(fast()).await;
    env.create(VmBuilder::new(NS, "man").run_strategy(RunStrategy::Manual))
        .await;
    env.printable("man", "Stopped").await;
    let (code, body) = env.put("man", "stop", None).await;
    assert_eq!(code, 409);
    assert!(message(&body).ends_with("VM is not running"));
    let (code, _) = env.put("man", "start", None).await;
    assert_eq!(code, 202);
    let uid = env.running("man").await;
    let vm = env.vm("man").await;
    assert!(
        vm["status"].get("stateChangeRequests").is_none(),
        "start request trimmed: {vm}"
    );
    let (code, _) = env
        .put("man", "stop", Some(json!({"gracePeriod": 0})))
        .await;
    assert_eq!(code, 202);
    let requests = env.vm("man").await["status"]["stateChangeRequests"].clone();
    if !requests.is_null() {
        assert_eq!(requests, json!([{"action": "Stop", "uid": uid}]));
    }
    env.gone("man").await;
    assert_eq!(env.vm("man").await["spec"]["runStrategy"], "Manual");

    env.create(VmBuilder::new(NS, "rerun").run_strategy(RunStrategy::RerunOnFailure))
        .await;
    env.running("rerun").await;
    let (code, _) = env
        .put("rerun", "stop", Some(json!({"gracePeriod": 0})))
        .await;
    assert_eq!(code, 202);
    env.gone("rerun").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        env.vmi("rerun").await.is_none(),
        "a stopped RerunOnFailure VM stays off"
    );
    let (code, _) = env.put("rerun", "start", None).await;
    assert_eq!(code, 202);
    env.running("rerun").await;
}

#[tokio::test]
async fn legacy_running_once_and_halted_vms() {
    let env = setup(fast()).await;
    env.create(VmBuilder::new(NS, "legacy").running(false))
        .await;
    env.printable("legacy", "Stopped").await;
    let (code, _) = env.put("legacy", "start", None).await;
    assert_eq!(code, 202);
    assert_eq!(env.vm("legacy").await["spec"]["running"], true);
    env.running("legacy").await;
    let (code, _) = env
        .put("legacy", "stop", Some(json!({"gracePeriod": 0})))
        .await;
    assert_eq!(code, 202);
    assert_eq!(env.vm("legacy").await["spec"]["running"], false);
    env.gone("legacy").await;

    env.create(VmBuilder::new(NS, "once").run_strategy(RunStrategy::Once))
        .await;
    env.running("once").await;
    let (code, body) = env.put("once", "start", None).await;
    assert_eq!(code, 409, "{body}");
    let (code, _) = env
        .put("once", "stop", Some(json!({"gracePeriod": 0})))
        .await;
    assert_eq!(code, 202);
    assert_eq!(env.vm("once").await["spec"]["runStrategy"], "Halted");
    env.gone("once").await;
}

#[tokio::test]
async fn a_lost_host_fails_the_vmi_and_the_run_strategy_decides() {
    let env = setup(fast()).await;
    env.create(VmBuilder::new(NS, "always")).await;
    env.create(VmBuilder::new(NS, "manual").run_strategy(RunStrategy::Manual))
        .await;
    let (code, _) = env.put("manual", "start", None).await;
    assert_eq!(code, 202);
    let always_uid = env.running("always").await;
    env.running("manual").await;
    assert!(env.kv.lose_host(NS, "always"));
    assert!(env.kv.lose_host(NS, "manual"));
    assert_eq!(
        env.kv.domain_running(NS, "always"),
        Some(false),
        "the domain stops at once"
    );
    assert_eq!(env.kv.domain_running(NS, "manual"), Some(false));
    eventually(WITHIN, "manual's VMI Failed", || async {
        let vmi = env.vmi("manual").await?;
        (vmi["status"]["phase"] == "Failed").then_some(())
    })
    .await;
    env.printable("manual", "Stopped").await;
    let again = env.running("always").await;
    assert_ne!(again, always_uid, "Always started a new VMI");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let vmi = env.vmi("manual").await.unwrap();
    assert_eq!(vmi["status"]["phase"], "Failed", "Manual leaves it");
}

#[tokio::test]
async fn a_forced_kill_under_rerun_on_failure_is_undone_unless_halted_first() {
    let env = setup(fast()).await;
    env.kv.set_faults(Faults {
        forced_kill_fails: true,
        ..Faults::default()
    });
    env.create(VmBuilder::new(NS, "naive").run_strategy(RunStrategy::RerunOnFailure))
        .await;
    env.create(VmBuilder::new(NS, "careful").run_strategy(RunStrategy::RerunOnFailure))
        .await;
    let naive = env.running("naive").await;
    env.running("careful").await;

    let (code, _) = env
        .put("naive", "stop", Some(json!({"gracePeriod": 0})))
        .await;
    assert_eq!(code, 202);
    let restarted = eventually(WITHIN, "naive restarted", || async {
        let vmi = env.vmi("naive").await?;
        let uid = vmi["metadata"]["uid"].as_str()?.to_owned();
        (uid != naive && vmi["status"]["phase"] == "Running").then_some(uid)
    })
    .await;
    assert_ne!(restarted, naive);
    env.printable("naive", "Running").await;

    env.vms()
        .patch(
            "careful",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runStrategy": "Halted"}})),
        )
        .await
        .unwrap();
    let (code, _) = env
        .put("careful", "stop", Some(json!({"gracePeriod": 0})))
        .await;
    assert_eq!(code, 202);
    env.gone("careful").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(env.vmi("careful").await.is_none());
}

#[tokio::test]
async fn a_failed_vmi_whose_deletion_never_completes_keeps_the_vm_stopped() {
    let env = setup(fast()).await;
    env.kv.set_faults(Faults {
        failed_vmi_stuck: true,
        ..Faults::default()
    });
    env.create(VmBuilder::new(NS, "stuck")).await;
    let uid = env.running("stuck").await;
    assert!(env.kv.lose_host(NS, "stuck"));
    eventually(WITHIN, "stuck VMI deleted but kept", || async {
        let vmi = env.vmi("stuck").await?;
        (vmi["status"]["phase"] == "Failed" && vmi["metadata"]["deletionTimestamp"].is_string())
            .then_some(())
    })
    .await;
    env.printable("stuck", "Stopped").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let vmi = env.vmi("stuck").await.unwrap();
    assert_eq!(vmi["metadata"]["uid"], uid.as_str(), "never replaced");
    assert_eq!(
        vmi["metadata"]["finalizers"],
        json!(["kubevirt.io/foregroundDeleteVirtualMachine"])
    );
    assert_eq!(env.kv.domain_running(NS, "stuck"), Some(false));
}

#[tokio::test]
async fn virt_api_down_slow_controller_and_rbac() {
    let env = setup(fast()).await;
    env.create(VmBuilder::new(NS, "vm").run_strategy(RunStrategy::Manual))
        .await;
    env.printable("vm", "Stopped").await;
    env.kv.set_faults(Faults {
        controller_delay: Duration::from_millis(1500),
        ..Faults::default()
    });

    env.api.set_down(true);
    let (code, body) = env.put("vm", "start", None).await;
    assert_eq!((code, body), (503, json!("service unavailable\n")));
    env.api.set_down(false);

    let (code, body) = env.put_as(LIMITED_TOKEN, "vm", "stop", None).await;
    assert_eq!((code, body["reason"].as_str()), (403, Some("Forbidden")));
    assert_eq!(
        message(&body),
        "virtualmachines/stop \"vm\" is forbidden: User \"system:serviceaccount:vms:fencer\" cannot update resource \"virtualmachines/stop\" in API group \"subresources.kubevirt.io\" in the namespace \"vms\""
    );
    let (code, _) = env.put_as(LIMITED_TOKEN, "vm", "start", None).await;
    assert_eq!(code, 202);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        env.vmi("vm").await.is_none(),
        "the slow controller has not acted yet"
    );
    env.running("vm").await;
    let log = env.kube.requests();
    assert!(
        log.iter()
            .any(|r| r.path_and_query.ends_with("/vm/stop") && r.status == 403 && r.user.is_some())
    );
}

#[tokio::test]
async fn restart_replaces_the_vmi_and_halted_refuses_it() {
    let env = setup(fast()).await;
    env.create(VmBuilder::new(NS, "re")).await;
    let first = env.running("re").await;
    let (code, body) = env
        .put("re", "restart", Some(json!({"gracePeriodSeconds": 5})))
        .await;
    assert_eq!(
        (code, message(&body)),
        (
            400,
            "For force restart, only gracePeriod=0 is supported for now"
        )
    );
    let (code, _) = env
        .put("re", "restart", Some(json!({"gracePeriodSeconds": 0})))
        .await;
    assert_eq!(code, 202);
    let second = eventually(WITHIN, "a new VMI", || async {
        let vmi = env.vmi("re").await?;
        let uid = vmi["metadata"]["uid"].as_str()?.to_owned();
        (uid != first && vmi["status"]["phase"] == "Running").then_some(uid)
    })
    .await;
    assert_ne!(second, first);
    env.printable("re", "Running").await;
    assert!(
        env.vm("re").await["status"]
            .get("stateChangeRequests")
            .is_none()
    );

    env.create(VmBuilder::new(NS, "off").run_strategy(RunStrategy::Halted))
        .await;
    env.printable("off", "Stopped").await;
    let (code, body) = env.put("off", "restart", None).await;
    assert_eq!(code, 409);
    assert!(
        message(&body).ends_with("RunStategy Halted does not support manual restart requests"),
        "{body}"
    );
}
