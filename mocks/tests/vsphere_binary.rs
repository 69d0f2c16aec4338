//! The `mock-vsphere` binary as scripts use it: the ready line, the CA file, SOAP at
//! `/sdk`, the WSDL, the admin API (power, rename, faults, sessions, calls), and a
//! clean stop on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_mock-vsphere");
const UUID_1: &str = "4213e0f1-2a3b-4c5d-8e9f-a0b1c2d3e4f5";

fn soap(operation: &str, this_type: &str, this: &str, params: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><{operation} xmlns="urn:vim25"><_this type="{this_type}">{this}</_this>{params}</{operation}></soapenv:Body></soapenv:Envelope>"#
    )
}

#[tokio::test]
async fn the_binary_serves_soap_and_the_admin_api_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let mut command = Command::new(BIN);
    command
        .args(["--vm", &format!("worker-1={UUID_1}"), "--vm", "worker-2"])
        .arg("--ca-out")
        .arg(&ca)
        .env("MOCK_VSPHERE_PASSWORD", "pw-from-env");
    let crate::mock_binary::Started {
        mut child,
        url: base,
        log,
    } = crate::mock_binary::start(command, "mock-vsphere").await;
    assert!(base.starts_with("https://localhost:"), "{base}");

    nodefence_mocks::tls::install_crypto_provider();
    let pem = std::fs::read(&ca).expect("CA written by --ca-out");
    let c = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&pem).unwrap()])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    let vms: Value = c
        .get(format!("{base}/admin/vms"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(vms[0]["moid"], "vm-41");
    assert_eq!(vms[0]["bios_uuid"], UUID_1);
    assert_eq!(vms[1]["name"], "worker-2");
    assert_eq!(vms[1]["power"], "poweredOn");

    let login = soap(
        "Login",
        "SessionManager",
        "SessionManager",
        "<userName>administrator@vsphere.local</userName><password>pw-from-env</password>",
    );
    let r = c
        .post(format!("{base}/sdk"))
        .header("SOAPAction", "urn:vim25/8.0.2.0")
        .body(login)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(cookie.starts_with("vmware_soap_session=\""), "{cookie}");

    let r = c
        .post(format!("{base}/admin/vms/vm-41/power"))
        .json(&json!({ "state": "poweredOff" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["power"], "poweredOff");
    let r = c
        .post(format!("{base}/admin/vms/vm-41/rename"))
        .json(&json!({ "name": "worker-1-old" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["name"], "worker-1-old");
    let r = c
        .post(format!("{base}/admin/vms/vm-99/power"))
        .json(&json!({ "state": "poweredOff" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let wsdl = c
        .get(format!("{base}/sdk/vimService.wsdl"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        wsdl.contains(r#"<operation name="PowerOffVM_Task">"#),
        "{wsdl}"
    );

    let r = c
        .post(format!("{base}/admin/faults"))
        .json(&json!("unavailable"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let content = soap(
        "RetrieveServiceContent",
        "ServiceInstance",
        "ServiceInstance",
        "",
    );
    let r = c
        .post(format!("{base}/sdk"))
        .body(content.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    c.delete(format!("{base}/admin/faults"))
        .send()
        .await
        .unwrap();
    let r = c
        .post(format!("{base}/sdk"))
        .body(content)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("<apiType>VirtualCenter</apiType>")
    );

    let expired: Value = c
        .post(format!("{base}/admin/sessions/expire"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(expired["expired"], 1);
    let calls: Value = c
        .get(format!("{base}/admin/calls"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let methods: Vec<&str> = calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["Login", "RetrieveServiceContent"]);

    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap_or_else(|_| panic!("mock-vsphere did not stop within 10 s; its log: {log}"))
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM is a clean stop; its log: {log}"
    );
}
