//! The mock vCenter's vSphere Automation REST API (`/rest`): sessions with HTTP
//! Basic and `vmware-api-session-id`, the VM list and its filters, power stop and
//! start on the VMs SOAP serves, and vCenter's status codes and error bodies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use nodefence_mocks::vsphere::{
    Fault, MockVsphere, MockVsphereHandle, Product, REST_SESSION_HEADER, VmPower, VmSpec,
};
use reqwest::{Method, StatusCode};
use serde_json::Value;

const USER: &str = "fence@vsphere.local";
const PASSWORD: &str = "pa ss=word";

async fn vcenter(product: Product) -> (MockVsphereHandle, reqwest::Client) {
    let vc = MockVsphere::builder()
        .product(product)
        .credentials(USER, PASSWORD)
        .vm(VmSpec::new("worker-1").moid("vm-42").folder("k8s"))
        .vm(VmSpec::new("worker-2")
            .moid("vm-43")
            .power(VmPower::PoweredOff))
        .start()
        .await
        .expect("mock vSphere starts");
    nodefence_mocks::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(vc.ca_pem().as_bytes()).unwrap()])
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    (vc, client)
}

async fn login(vc: &MockVsphereHandle, c: &reqwest::Client) -> String {
    let r = c
        .post(format!("{}/rest/com/vmware/cis/session", vc.base_url()))
        .basic_auth(USER, Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    body["value"].as_str().expect("a session id").to_string()
}

async fn call(
    vc: &MockVsphereHandle,
    c: &reqwest::Client,
    method: Method,
    path: &str,
    session: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = c.request(method, format!("{}/rest/{path}", vc.base_url()));
    if let Some(s) = session {
        req = req.header(REST_SESSION_HEADER, s);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    (status, body)
}

fn error_type(body: &Value) -> &str {
    body["type"].as_str().unwrap_or("")
}

fn first_message(body: &Value) -> &str {
    body["value"]["messages"][0]["default_message"]
        .as_str()
        .unwrap_or("")
}

#[tokio::test]
async fn a_session_comes_from_basic_auth_and_every_other_call_needs_it() {
    let (vc, c) = vcenter(Product::VCenter).await;
    let url = format!("{}/rest/com/vmware/cis/session", vc.base_url());

    let r = c.post(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().contains_key("www-authenticate"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        error_type(&body),
        "com.vmware.vapi.std.errors.unauthenticated"
    );
    let r = c
        .post(&url)
        .basic_auth(USER, Some("wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    for session in [None, Some("not-a-session")] {
        let (status, body) = call(&vc, &c, Method::GET, "vcenter/vm", session).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{session:?}");
        assert_eq!(
            error_type(&body),
            "com.vmware.vapi.std.errors.unauthenticated"
        );
        assert_eq!(first_message(&body), "This method requires authentication.");
    }

    let session = login(&vc, &c).await;
    assert_eq!(session.len(), 32, "{session}");
    assert_eq!(vc.session_count(), 1);
    let (status, _) = call(&vc, &c, Method::GET, "vcenter/vm", Some(&session)).await;
    assert_eq!(status, StatusCode::OK);

    let (status, _) = call(
        &vc,
        &c,
        Method::DELETE,
        "com/vmware/cis/session",
        Some(&session),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(vc.session_count(), 0);
    let (status, _) = call(&vc, &c, Method::GET, "vcenter/vm", Some(&session)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a deleted session is gone"
    );

    let session = login(&vc, &c).await;
    vc.expire_sessions();
    let (status, _) = call(&vc, &c, Method::GET, "vcenter/vm", Some(&session)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "expired with SOAP's");
    vc.shutdown().await;
}

#[tokio::test]
async fn the_vm_list_filters_by_name_id_and_power_state() {
    let (vc, c) = vcenter(Product::VCenter).await;
    let s = login(&vc, &c).await;
    let list = |query: &'static str| {
        let (vc, c, s) = (&vc, &c, s.clone());
        async move {
            let (status, body) =
                call(vc, c, Method::GET, &format!("vcenter/vm{query}"), Some(&s)).await;
            assert_eq!(status, StatusCode::OK, "{query}: {body}");
            body["value"].as_array().unwrap().clone()
        }
    };
    let all = list("").await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["vm"], "vm-42");
    assert_eq!(all[0]["name"], "worker-1");
    assert_eq!(all[0]["power_state"], "POWERED_ON");
    assert!(all[0]["cpu_count"].is_u64());
    assert!(all[0]["memory_size_MiB"].is_u64());
    assert_eq!(all[1]["power_state"], "POWERED_OFF");

    let one = list("?filter.names=worker-2").await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["vm"], "vm-43");
    assert_eq!(
        list("?filter.names.1=worker-1&filter.names.2=worker-2")
            .await
            .len(),
        2
    );
    assert!(list("?filter.names=nobody").await.is_empty());
    assert_eq!(list("?filter.vms=vm-42").await[0]["name"], "worker-1");
    assert_eq!(
        list("?filter.power_states=POWERED_OFF").await[0]["vm"],
        "vm-43"
    );

    vc.set_power("vm-42", VmPower::Suspended);
    assert_eq!(
        list("?filter.names=worker-1").await[0]["power_state"],
        "SUSPENDED",
        "out-of-band changes show"
    );
    let (status, body) = call(
        &vc,
        &c,
        Method::GET,
        "vcenter/vm?filter.folders=group-v3",
        Some(&s),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        error_type(&body),
        "com.vmware.vapi.std.errors.invalid_argument"
    );
    vc.shutdown().await;
}

#[tokio::test]
async fn stop_and_start_switch_the_vm_soap_reads_and_are_recorded() {
    let (vc, c) = vcenter(Product::VCenter).await;
    let s = login(&vc, &c).await;
    let post = |path: &'static str| {
        let (vc, c, s) = (&vc, &c, s.clone());
        async move { call(vc, c, Method::POST, path, Some(&s)).await }
    };

    let (status, body) = post("vcenter/vm/vm-42/power/stop").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, Value::Null, "no body");
    assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOff));
    assert_eq!(vc.power("vm-43"), Some(VmPower::PoweredOff), "untouched");

    let (status, body) = post("vcenter/vm/vm-42/power/stop").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        error_type(&body),
        "com.vmware.vapi.std.errors.already_in_desired_state"
    );
    assert_eq!(
        first_message(&body),
        "Virtual machine is already powered off."
    );
    assert_eq!(
        body["value"]["messages"][0]["id"],
        "com.vmware.api.vcenter.vm.power.already_powered_off"
    );

    let (status, body) = call(&vc, &c, Method::GET, "vcenter/vm/vm-42/power", Some(&s)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["value"]["state"], "POWERED_OFF");

    let (status, _) = post("vcenter/vm/vm-42/power/start").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOn));
    let (status, body) = post("vcenter/vm/vm-42/power/start").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        first_message(&body),
        "Virtual machine is already powered on."
    );

    let (status, body) = post("vcenter/vm/vm-99/power/stop").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_type(&body), "com.vmware.vapi.std.errors.not_found");

    let stop = "POST /rest/vcenter/vm/{vm}/power/stop".to_string();
    let start = "POST /rest/vcenter/vm/{vm}/power/start".to_string();
    assert_eq!(
        vc.power_calls(),
        vec![
            (stop.clone(), "vm-42".to_string()),
            (stop.clone(), "vm-42".to_string()),
            (start.clone(), "vm-42".to_string()),
            (start, "vm-42".to_string()),
            (stop, "vm-99".to_string()),
        ]
    );
    vc.shutdown().await;
}

#[tokio::test]
async fn power_calls_wait_for_the_task_and_faults_apply() {
    let (vc, c) = vcenter(Product::VCenter).await;
    let s = login(&vc, &c).await;
    let post = |path: &'static str| {
        let (vc, c, s) = (&vc, &c, s.clone());
        async move { call(vc, c, Method::POST, path, Some(&s)).await }
    };

    vc.inject(Fault::SlowTasks(Duration::from_millis(600)));
    let started = Instant::now();
    let (status, _) = post("vcenter/vm/vm-42/power/stop").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "answered when the task ended"
    );
    assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOff));
    vc.clear_faults();

    vc.inject(Fault::FailNextTask("GenericVmConfigFault".into()));
    let (status, body) = post("vcenter/vm/vm-42/power/start").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(error_type(&body), "com.vmware.vapi.std.errors.error");
    assert!(
        first_message(&body).contains("GenericVmConfigFault"),
        "{body}"
    );
    assert_eq!(vc.power("vm-42"), Some(VmPower::PoweredOff), "unchanged");

    vc.inject(Fault::NoPowerPrivilege);
    let (status, body) = post("vcenter/vm/vm-42/power/start").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(error_type(&body), "com.vmware.vapi.std.errors.unauthorized");
    vc.clear_faults();

    vc.inject(Fault::Unavailable);
    let r = c
        .get(format!("{}/rest/vcenter/vm", vc.base_url()))
        .header(REST_SESSION_HEADER, &s)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    vc.shutdown().await;
}

#[tokio::test]
async fn esxi_has_no_rest_api() {
    let (vc, c) = vcenter(Product::Esxi).await;
    let r = c
        .post(format!("{}/rest/com/vmware/cis/session", vc.base_url()))
        .basic_auth(USER, Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    vc.shutdown().await;
}
