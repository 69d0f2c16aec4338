//! A KubeVirt infrastructure cluster for tests: fake-kube over HTTPS with the
//! VirtualMachine and VirtualMachineInstance CRDs, virt-api's subresources behind
//! the aggregated-API hook, and the virt-controller/virt-handler stand-in, all from
//! `nodefence_mocks::kubevirt`.
//!
//! nodefence's identity there is the ServiceAccount `nodefence-fencer` with exactly
//! the Role `deploy/kubevirt-infra/rbac.yaml` ships (so every test through it also
//! proves that Role suffices); its kubeconfig is what the inventory names.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use nodefence::config::{KubevirtTarget, Timeouts};
use nodefence_mocks::kube::authz::Policy;
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use nodefence_mocks::kubevirt::{
    self, KubevirtStandIn, RunStrategy, SUBRESOURCES_GROUP, SUBRESOURCES_VERSION, Timing, VirtApi,
    VmBuilder,
};
use serde_json::Value;

/// The namespace of the guest cluster's VMs.
pub const VM_NAMESPACE: &str = "guests";
/// The token of `nodefence-fencer` (deploy/kubevirt-infra).
pub const FENCER_TOKEN: &str = "nodefence-fencer-token";
/// The ServiceAccount the shipped Role is bound to.
pub const FENCER: &str = "nodefence-fencer";

/// The shipped infrastructure RBAC, as the objects kustomize puts in `namespace`.
pub fn shipped_rbac(namespace: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubevirt-infra/rbac.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .map(|mut d| {
            d["metadata"]["namespace"] = Value::from(namespace);
            if let Some(subjects) = d.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects {
                    s["namespace"] = Value::from(namespace);
                }
            }
            d
        })
        .collect()
}

/// Phases and kills in tens of milliseconds; a grace-period second is 100 ms (the
/// default 180 s: 18 s, longer than any forced stop may take).
pub fn fast_timing() -> Timing {
    Timing {
        resync: Duration::from_millis(200),
        controller_delay: Duration::ZERO,
        pending: Duration::from_millis(100),
        scheduling: Duration::from_millis(100),
        scheduled: Duration::from_millis(100),
        kill: Duration::from_millis(100),
        grace_second: Duration::from_millis(100),
        host_lost_to_failed: Duration::from_millis(500),
    }
}

/// Short deadlines so failure paths finish quickly (this file is shared with the
/// benches, which do not have `tests/common`'s).
pub const FAST_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(2),
    request: Duration::from_secs(2),
    operation: Duration::from_secs(8),
    retries: 3,
};

/// One infrastructure cluster.
pub struct Infra {
    pub kube: FakeKubeHandle,
    /// The admin's client (the tests' own reads and writes).
    pub client: Client,
    pub api: Arc<VirtApi>,
    pub kv: KubevirtStandIn,
    dir: tempfile::TempDir,
}

impl Infra {
    pub async fn start(timing: Timing) -> Infra {
        Self::start_with(timing, &[]).await
    }

    /// With more identities: (token, ServiceAccount name, RBAC objects).
    pub async fn start_with(timing: Timing, extra: &[(&str, &str, Vec<Value>)]) -> Infra {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let api = VirtApi::new();
        let mut builder = FakeKube::builder()
            .tls(true)
            .aggregated_api(SUBRESOURCES_GROUP, SUBRESOURCES_VERSION, api.clone())
            .identity(
                FENCER_TOKEN,
                format!("system:serviceaccount:{VM_NAMESPACE}:{FENCER}"),
                Policy::for_service_account(&shipped_rbac(VM_NAMESPACE), VM_NAMESPACE, FENCER),
            );
        for (token, name, rbac) in extra {
            builder = builder.identity(
                *token,
                format!("system:serviceaccount:{VM_NAMESPACE}:{name}"),
                Policy::for_service_account(rbac, VM_NAMESPACE, name),
            );
        }
        let kube = builder.start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let admin = dir.path().join("admin.kubeconfig");
        kube.write_kubeconfig(&admin).unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(&admin).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = Client::try_from(config).unwrap();
        api.connect(client.clone());
        nodefence_mocks::remediation::install_crds(&client, kubevirt::crds())
            .await
            .unwrap();
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": VM_NAMESPACE}}))
                .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let kv = KubevirtStandIn::spawn(client.clone(), VM_NAMESPACE, timing);
        Infra {
            kube,
            client,
            api,
            kv,
            dir,
        }
    }

    /// A kubeconfig for `token`, written to a file of its own.
    pub fn kubeconfig_for(&self, token: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{token}.kubeconfig"));
        std::fs::write(&path, self.kube.kubeconfig_yaml_for(token)).unwrap();
        path
    }

    /// The kubeconfig of nodefence's identity (the shipped Role).
    pub fn fencer_kubeconfig(&self) -> PathBuf {
        self.kubeconfig_for(FENCER_TOKEN)
    }

    /// A target for VM `vm` through `kubeconfig`.
    pub fn target(&self, kubeconfig: &Path, vm: &str, timeouts: Timeouts) -> KubevirtTarget {
        KubevirtTarget {
            kubeconfig: kubeconfig.to_path_buf(),
            context: None,
            namespace: VM_NAMESPACE.into(),
            vm: vm.into(),
            timeouts,
        }
    }

    /// nodefence's driver for VM `vm` through `kubeconfig`, built as the daemon
    /// builds it (one shared client per kubeconfig).
    pub fn driver(&self, kubeconfig: &Path, vm: &str) -> Arc<dyn nodefence::power::PowerDriver> {
        nodefence::tls::install_crypto_provider();
        nodefence::power::registry::DriverFactory::new(8)
            .driver(&nodefence::config::NodeTarget {
                fallback: Vec::new(),
                origin: Default::default(),
                metal3_host: None,
                name: vm.into(),
                group: None,
                power: nodefence::config::PowerSource::Kubevirt(self.target(
                    kubeconfig,
                    vm,
                    FAST_TIMEOUTS,
                )),
                policy: Default::default(),
            })
            .unwrap()
    }

    fn resource(kind: &str, plural: &str) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kubevirt.io", "v1", kind), plural)
    }

    pub fn vms(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            VM_NAMESPACE,
            &Self::resource("VirtualMachine", "virtualmachines"),
        )
    }

    pub fn vmis(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            VM_NAMESPACE,
            &Self::resource("VirtualMachineInstance", "virtualmachineinstances"),
        )
    }

    pub async fn create(&self, vm: VmBuilder) {
        let obj: DynamicObject = serde_json::from_value(vm.build()).unwrap();
        self.vms()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }

    /// Creates VM `name` (`strategy`, firmware UUID `uuid`) and waits until it runs.
    pub async fn running_vm(&self, name: &str, strategy: RunStrategy, uuid: &str) {
        self.create(
            VmBuilder::new(VM_NAMESPACE, name)
                .run_strategy(strategy)
                .firmware_uuid(uuid),
        )
        .await;
        self.wait_running(name).await;
    }

    pub async fn vm(&self, name: &str) -> Value {
        serde_json::to_value(self.vms().get(name).await.unwrap()).unwrap()
    }

    pub async fn vmi(&self, name: &str) -> Option<Value> {
        self.vmis()
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    }

    /// `spec.runStrategy` now.
    pub async fn run_strategy(&self, name: &str) -> String {
        self.vm(name).await["spec"]["runStrategy"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub async fn printable_status(&self, name: &str) -> String {
        self.vm(name).await["status"]["printableStatus"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Whether VM `name`'s domain runs (false without a VMI).
    pub fn running(&self, name: &str) -> bool {
        self.kv.domain_running(VM_NAMESPACE, name) == Some(true)
    }

    /// Waits until VM `name` runs (its VMI `Running`).
    pub async fn wait_running(&self, name: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let phase = self
                .vmi(name)
                .await
                .and_then(|v| v["status"]["phase"].as_str().map(str::to_string));
            if phase.as_deref() == Some("Running") && self.running(name) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} never ran: VMI phase {phase:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The mutating requests made with `token`'s identity (method, path).
    pub fn writes_by(&self, user_suffix: &str) -> Vec<(String, String)> {
        self.kube
            .requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .filter(|r| r.user.as_deref().is_some_and(|u| u.ends_with(user_suffix)))
            .map(|r| (r.method, r.path_and_query))
            .collect()
    }
}
