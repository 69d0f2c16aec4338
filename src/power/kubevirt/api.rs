//! The KubeVirt infrastructure cluster, as the driver talks to it: one client per
//! kubeconfig and context (connected on first use, shared by every VM it serves),
//! each call bounded by the request timeout and the BMC concurrency limit, and each
//! failure turned into a [`PowerError`] that names the object and the fix.
//!
//! Calls: GET `kubevirt.io/v1` VirtualMachine and VirtualMachineInstance, a merge
//! PATCH of the VirtualMachine, and PUT of the `subresources.kubevirt.io/v1`
//! `stop`/`start` subresources (served by virt-api behind an APIService).

use std::path::PathBuf;
use std::sync::Arc;

use kube::api::{GetParams, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Request;
use serde_json::Value;
use tokio::sync::{OnceCell, Semaphore};

use crate::config::Timeouts;
use crate::power::PowerError;

/// KubeVirt's API group and version.
pub const KUBEVIRT_API: &str = "/apis/kubevirt.io/v1";
/// virt-api's subresource group and version.
pub const SUBRESOURCES_API: &str = "/apis/subresources.kubevirt.io/v1";

/// Where the infrastructure cluster is, and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InfraProfile {
    pub kubeconfig: PathBuf,
    pub context: Option<String>,
    pub timeouts: Timeouts,
}

/// One infrastructure cluster's client, connected on first use.
pub struct InfraClient {
    profile: InfraProfile,
    client: OnceCell<kube::Client>,
    limiter: Arc<Semaphore>,
}

impl std::fmt::Debug for InfraClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InfraClient")
            .field("kubeconfig", &self.profile.kubeconfig)
            .field("context", &self.profile.context)
            .finish_non_exhaustive()
    }
}

/// Why a call failed: the answers callers handle themselves apart from the rest.
#[derive(Debug)]
pub enum CallError {
    /// 409 Conflict: a stale `resourceVersion`, or virt-api's "VM is not running".
    Conflict(String),
    /// 404: the object does not exist.
    NotFound(PowerError),
    Failed(PowerError),
}

impl CallError {
    /// As a power error (a conflict where none was expected is the API's protocol).
    pub fn into_power(self) -> PowerError {
        match self {
            CallError::Conflict(m) => PowerError::protocol(m),
            CallError::NotFound(e) | CallError::Failed(e) => e,
        }
    }
}

impl From<PowerError> for CallError {
    fn from(e: PowerError) -> Self {
        CallError::Failed(e)
    }
}

impl InfraClient {
    pub fn new(profile: InfraProfile, limiter: Arc<Semaphore>) -> Self {
        Self {
            profile,
            client: OnceCell::new(),
            limiter,
        }
    }

    pub fn profile(&self) -> &InfraProfile {
        &self.profile
    }

    async fn client(&self) -> Result<&kube::Client, PowerError> {
        self.client.get_or_try_init(|| connect(&self.profile)).await
    }

    /// GETs a `kubevirt.io/v1` object; `Ok(None)` for 404.
    pub async fn get(
        &self,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, PowerError> {
        let url = format!("{KUBEVIRT_API}/namespaces/{namespace}/{plural}");
        let request = Request::new(url)
            .get(name, &GetParams::default())
            .map_err(|e| PowerError::config(format!("cannot build the request: {e}")))?;
        match self.send(request, &what(plural, namespace, name)).await {
            Ok(v) => Ok(Some(v)),
            Err(CallError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into_power()),
        }
    }

    /// A JSON merge patch of a VirtualMachine.
    pub async fn patch_vm(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, CallError> {
        let url = format!("{KUBEVIRT_API}/namespaces/{namespace}/virtualmachines");
        let request = Request::new(url)
            .patch(
                name,
                &PatchParams::default(),
                &kube::api::Patch::Merge(patch),
            )
            .map_err(|e| PowerError::config(format!("cannot build the request: {e}")))?;
        self.send(request, &what("virtualmachines", namespace, name))
            .await
    }

    /// PUTs virt-api's `stop` or `start` subresource of a VirtualMachine.
    pub async fn vm_subresource(
        &self,
        action: &str,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<(), CallError> {
        let url = format!("{SUBRESOURCES_API}/namespaces/{namespace}/virtualmachines");
        let bytes = serde_json::to_vec(body)
            .map_err(|e| PowerError::config(format!("cannot encode the request: {e}")))?;
        let request = Request::new(url)
            .replace_subresource(action, name, &PostParams::default(), bytes)
            .map_err(|e| PowerError::config(format!("cannot build the request: {e}")))?;
        let subject = format!("virtualmachines/{action} of {namespace}/{name}");
        // virt-api answers 202 with an empty body.
        self.send_text(request, &subject).await.map(|_| ())
    }

    async fn send(
        &self,
        request: http::Request<Vec<u8>>,
        subject: &str,
    ) -> Result<Value, CallError> {
        let text = self.send_text(request, subject).await?;
        serde_json::from_str(&text).map_err(|e| {
            CallError::Failed(PowerError::protocol(format!(
                "{subject}: the infrastructure cluster answered something that is not JSON: {e}"
            )))
        })
    }

    async fn send_text(
        &self,
        request: http::Request<Vec<u8>>,
        subject: &str,
    ) -> Result<String, CallError> {
        let client = self.client().await?;
        let _permit = self
            .limiter
            .acquire()
            .await
            .map_err(|_| PowerError::unreachable("shutting down"))?;
        match tokio::time::timeout(self.profile.timeouts.request, client.request_text(request))
            .await
        {
            Err(_) => Err(CallError::Failed(PowerError::unreachable(format!(
                "{subject}: the infrastructure cluster did not answer within {}",
                humantime::format_duration(self.profile.timeouts.request)
            )))),
            Ok(Ok(text)) => Ok(text),
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => Err(CallError::Conflict(
                crate::untrusted::field(&status.message),
            )),
            Ok(Err(e @ kube::Error::Api(_))) if matches!(&e, kube::Error::Api(s) if s.code == 404) => {
                Err(CallError::NotFound(api_error(subject, &e)))
            }
            Ok(Err(e)) => Err(CallError::Failed(api_error(subject, &e))),
        }
    }
}

/// `virtualmachines ns/name`, for messages.
fn what(plural: &str, namespace: &str, name: &str) -> String {
    let kind = match plural {
        "virtualmachines" => "VirtualMachine",
        "virtualmachineinstances" => "VirtualMachineInstance",
        other => other,
    };
    format!("{kind} {namespace}/{name}")
}

/// A failed call, named, with the fix.
fn api_error(subject: &str, e: &kube::Error) -> PowerError {
    match e {
        kube::Error::Api(s) => {
            let said = crate::untrusted::field(&s.message);
            match s.code {
                401 => PowerError::auth(format!(
                    "{subject}: the infrastructure cluster refused the kubeconfig's credentials \
                     (401): renew the token in the kubeconfig Secret"
                )),
                403 => PowerError::privilege(format!(
                    "{subject}: forbidden (403: {said}): bind the Role of \
                     deploy/kubevirt-infra in the VM's namespace to the kubeconfig's \
                     user"
                )),
                404 => PowerError::config(format!(
                    "{subject} does not exist in the infrastructure cluster (404: {said})"
                )),
                code => PowerError::unreachable(format!(
                    "{subject}: the infrastructure cluster answered {code}: {said}"
                )),
            }
        }
        kube::Error::Auth(err) => PowerError::auth(format!(
            "{subject}: the kubeconfig's credentials cannot be used: {}",
            crate::untrusted::field(&err.to_string())
        )),
        kube::Error::SerdeError(err) => PowerError::protocol(format!(
            "{subject}: the infrastructure cluster's answer cannot be read: {err}"
        )),
        other => {
            let detail = format!("{other}{}", crate::power::error_sources(other));
            let lower = detail.to_ascii_lowercase();
            let text = crate::untrusted::field(&detail);
            if lower.contains("certificate") || lower.contains("tls") {
                PowerError::tls(format!(
                    "{subject}: the infrastructure cluster's certificate was refused: {text}; \
                     check the kubeconfig's certificate-authority-data"
                ))
            } else {
                PowerError::unreachable(format!(
                    "{subject}: cannot reach the infrastructure cluster: {text}"
                ))
            }
        }
    }
}

/// Reads the kubeconfig and builds the client (nodefence's User-Agent, the
/// source's connect and request timeouts). Never quotes the file: it holds a token.
async fn connect(profile: &InfraProfile) -> Result<kube::Client, PowerError> {
    let shown = profile.kubeconfig.display();
    let kubeconfig = Kubeconfig::read_from(&profile.kubeconfig).map_err(|_| {
        PowerError::config(format!(
            "kubeconfig {shown} cannot be read as a kubeconfig (run `nodefence validate`)"
        ))
    })?;
    let options = KubeConfigOptions {
        context: profile.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| {
            PowerError::config(format!(
                "kubeconfig {shown}: {}",
                crate::untrusted::field(&e.to_string())
            ))
        })?;
    config.connect_timeout = Some(profile.timeouts.connect);
    config.read_timeout = Some(profile.timeouts.request);
    config.write_timeout = Some(profile.timeouts.request);
    crate::cluster::client(config).map_err(|e| {
        PowerError::config(format!(
            "kubeconfig {shown}: cannot build a client: {}",
            crate::untrusted::field(&e.to_string())
        ))
    })
}
