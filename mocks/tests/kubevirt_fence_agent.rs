//! Debian's `fence_kubevirt` (ClusterLabs fence-agents, on the Python `kubernetes`
//! client and `openshift.dynamic.DynamicClient`) against fake-kube over HTTPS with the
//! KubeVirt stand-in: its discovery, its status from the VMI's phase (`on` for
//! Running, `off` without a VMI, and its trap: a Failed VMI is `unknown`, a failed
//! action), and its `off`/`on` through virt-api's `stop`/`start` landing on the VM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube_common::{client, eventually, provider};
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use nodefence_mocks::kubevirt::{
    self, KubevirtStandIn, RunStrategy, SUBRESOURCES_GROUP, SUBRESOURCES_VERSION, Timing, VirtApi,
    VmBuilder,
};
use nodefence_mocks::remediation::install_crds;
use serde_json::{Value, json};
use tokio::process::Command;

const NS: &str = "vms";
const WITHIN: Duration = Duration::from_secs(30);

struct Env {
    kube: FakeKubeHandle,
    vms: Api<DynamicObject>,
    vmis: Api<DynamicObject>,
    kv: KubevirtStandIn,
    kubeconfig: tempfile::NamedTempFile,
}

async fn setup() -> Env {
    provider();
    let api = VirtApi::new();
    let kube = FakeKube::builder()
        .tls(true)
        .aggregated_api(SUBRESOURCES_GROUP, SUBRESOURCES_VERSION, api.clone())
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
    // A 180 s grace period lasts 3.6 s: within the agent's 40 s power timeout.
    let timing = Timing {
        resync: Duration::from_millis(200),
        grace_second: Duration::from_millis(20),
        host_lost_to_failed: Duration::from_millis(300),
        ..Timing::default().scaled(20.0)
    };
    let kv = KubevirtStandIn::spawn(client.clone(), NS, timing);
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    kube.write_kubeconfig(kubeconfig.path()).unwrap();
    let gvk = |kind| GroupVersionKind::gvk("kubevirt.io", "v1", kind);
    Env {
        vms: Api::namespaced_with(
            client.clone(),
            NS,
            &ApiResource::from_gvk_with_plural(&gvk("VirtualMachine"), "virtualmachines"),
        ),
        vmis: Api::namespaced_with(
            client,
            NS,
            &ApiResource::from_gvk_with_plural(
                &gvk("VirtualMachineInstance"),
                "virtualmachineinstances",
            ),
        ),
        kube,
        kv,
        kubeconfig,
    }
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn fence(agent: &Path, kubeconfig: &Path, vm: &str, action: &str) -> Run {
    let mut cmd = Command::new(agent);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--namespace", NS, "--plug", vm, "-o", action])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in nodefence_mocks::PROXY_VARIABLES {
        cmd.env_remove(var);
    }
    // The agent's DynamicClient caches discovery under the temporary directory.
    let cache = tempfile::tempdir().unwrap();
    cmd.env("TMPDIR", cache.path());
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("fence_kubevirt finished in time")
        .expect("fence_kubevirt ran");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn agent() -> Option<PathBuf> {
    nodefence_mocks::peers::fence_kubevirt()
}

impl Env {
    async fn create(&self, vm: VmBuilder) {
        let obj: DynamicObject = serde_json::from_value(vm.build()).unwrap();
        self.vms.create(&PostParams::default(), &obj).await.unwrap();
    }

    async fn vm(&self, name: &str) -> Value {
        serde_json::to_value(self.vms.get(name).await.unwrap()).unwrap()
    }

    async fn phase(&self, name: &str) -> Option<String> {
        let vmi = self.vmis.get_opt(name).await.unwrap()?;
        let v = serde_json::to_value(vmi).unwrap();
        Some(v["status"]["phase"].as_str().unwrap_or_default().to_owned())
    }

    async fn wait_phase(&self, name: &str, want: Option<&str>) {
        eventually(WITHIN, &format!("{name} {want:?}"), || async {
            (self.phase(name).await.as_deref() == want).then_some(())
        })
        .await;
    }

    fn path(&self) -> &Path {
        self.kubeconfig.path()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_kubevirt_reads_and_sets_power_through_the_stand_in() {
    let Some(agent) = agent() else { return };
    let env = setup().await;
    env.create(VmBuilder::new(NS, "guest")).await;
    env.wait_phase("guest", Some("Running")).await;

    let run = fence(&agent, env.path(), "guest", "status").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("Status: ON"), "{run:?}");

    let run = fence(&agent, env.path(), "guest", "off").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("Success: Powered OFF"), "{run:?}");
    assert_eq!(env.vm("guest").await["spec"]["runStrategy"], "Halted");
    assert_eq!(env.phase("guest").await, None, "off means no VMI");
    assert_ne!(
        env.kv.domain_running(NS, "guest"),
        Some(true),
        "the domain is off"
    );

    let run = fence(&agent, env.path(), "guest", "status").await;
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stdout.contains("Status: OFF"), "{run:?}");

    let run = fence(&agent, env.path(), "guest", "on").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("Success: Powered ON"), "{run:?}");
    assert_eq!(env.vm("guest").await["spec"]["runStrategy"], "Always");
    assert_eq!(env.phase("guest").await.as_deref(), Some("Running"));

    let puts: Vec<_> = env
        .kube
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path_and_query.contains("subresources.kubevirt.io"))
        .map(|r| (r.path_and_query, r.status))
        .collect();
    assert_eq!(
        puts,
        [
            (
                format!(
                    "/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/guest/stop"
                ),
                202
            ),
            (
                format!(
                    "/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/guest/start"
                ),
                202
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_kubevirt_fails_on_a_failed_vmi_and_a_missing_vm() {
    let Some(agent) = agent() else { return };
    let env = setup().await;
    env.create(VmBuilder::new(NS, "manual").run_strategy(RunStrategy::Manual))
        .await;
    let run = fence(&agent, env.path(), "manual", "on").await;
    assert_eq!(run.code, Some(0), "{run:?}");
    env.wait_phase("manual", Some("Running")).await;
    assert!(env.kv.lose_host(NS, "manual"));
    env.wait_phase("manual", Some("Failed")).await;

    // The trap: a Failed VMI is neither on nor off to the agent.
    let run = fence(&agent, env.path(), "manual", "status").await;
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        !run.stdout.contains("Status: ON") && !run.stdout.contains("Status: OFF"),
        "{run:?}"
    );

    let run = fence(&agent, env.path(), "absent", "status").await;
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.contains("doesn't exist"), "{run:?}");
}
