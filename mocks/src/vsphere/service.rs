//! The `/sdk` endpoint: one SOAP request in, one reply out. The subset a power
//! fencing client needs, with vSphere's names and shapes:
//!
//! - `RetrieveServiceContent` on `ServiceInstance` (no session needed);
//! - `SessionManager.Login` (sets the `vmware_soap_session` cookie) and `Logout`;
//! - `SearchIndex.FindByUuid` and `FindAllByUuid` (BIOS `config.uuid`, or
//!   `config.instanceUuid` with `instanceUuid` true; exact UUID, as vCenter
//!   compares; the first match, or every match; within one `datacenter` when the
//!   call names one) and
//!   `SearchIndex.FindByInventoryPath` (`<datacenter>/vm/<folders>/<name>`, or a
//!   datacenter's name for the Datacenter, leading and trailing slashes ignored);
//!   both answer an empty response when nothing matches;
//! - `ViewManager.CreateContainerView` of VirtualMachines (and `View.DestroyView`), and
//!   `PropertyCollector.RetrievePropertiesEx` for a VM (`name`, `runtime.powerState`,
//!   `summary.runtime.powerState`, `config.uuid`, `config.instanceUuid`), every VM of a
//!   ContainerView, or a Task (`info.state`, `info.error`);
//! - the WSDL of this subset at `/sdk/vimService.wsdl` (for clients that build
//!   their calls from it);
//! - `VirtualMachine.PowerOffVM_Task` / `PowerOnVM_Task`, answering a Task reference.
//!
//! Every call but `RetrieveServiceContent` and `Login` needs a live session, else
//! `NotAuthenticated`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::model::{API_VERSION, VmState, split_path};
use super::soap::{self, moref};
use super::state::{CallRecord, PowerOp, Shared, TaskInfoState};
use super::xml::{Element, escape, parse};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "vmware_soap_session";

fn session_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim_matches('"').to_string())
}

/// Handles `POST /sdk`.
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if shared.lock().faults.unavailable {
        return soap::unavailable();
    }
    let text = String::from_utf8_lossy(&body);
    let request = match parse(&text) {
        Ok(root) if root.name == "Envelope" => root,
        Ok(_) => return soap::client_fault("the request is not a SOAP envelope"),
        Err(e) => return soap::client_fault(&format!("cannot read the request: {e}")),
    };
    let Some(call) = request.child("Body").and_then(|b| b.children.first()) else {
        return soap::client_fault("the SOAP body holds no operation");
    };
    let this = call.child_text("_this").unwrap_or("").to_string();
    let key = session_key(&headers);
    let authenticated = {
        let mut inner = shared.lock();
        let live = key.as_ref().is_some_and(|k| inner.sessions.contains_key(k));
        inner.calls.push(CallRecord {
            method: call.name.clone(),
            this: this.clone(),
            soap_action: headers
                .get("soapaction")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
            authenticated: live,
        });
        live
    };
    let product = shared.config.product;
    match call.name.as_str() {
        "RetrieveServiceContent" => service_content(&shared),
        "Login" => login(&shared, call),
        _ if !authenticated => soap::not_authenticated(product.root_folder()),
        "Logout" => {
            if let Some(k) = key {
                shared.lock().sessions.remove(&k);
            }
            soap::reply("Logout", "")
        }
        "FindByUuid" => find_by_uuid(&shared, call),
        "DestroyView" => {
            shared.lock().views.remove(&this);
            soap::reply("DestroyView", "")
        }
        "FindAllByUuid" if shared.lock().faults.no_find_all_by_uuid => {
            soap::unresolved_method("FindAllByUuid")
        }
        "FindAllByUuid" => find_all_by_uuid(&shared, call),
        "CreateContainerView" => create_container_view(&shared, call),
        "FindByInventoryPath" => find_by_path(&shared, call),
        "RetrievePropertiesEx" => retrieve_properties(&shared, call),
        "PowerOffVM_Task" => power(&shared, &this, PowerOp::PowerOff),
        "PowerOnVM_Task" => power(&shared, &this, PowerOp::PowerOn),
        other => soap::fault(
            "MethodNotFound",
            &format!("The method {other} is not supported by this mock"),
            "",
        ),
    }
}

fn service_content(shared: &Shared) -> Response {
    let p = shared.config.product;
    let about = format!(
        "<about><name>{name}</name><fullName>{full}</fullName><vendor>VMware, Inc.</vendor>\
         <version>8.0.2</version><osType>linux-x64</osType><apiType>{api_type}</apiType>\
         <apiVersion>{API_VERSION}</apiVersion></about>",
        name = if p.api_type() == "HostAgent" {
            "VMware ESXi"
        } else {
            "VMware vCenter Server"
        },
        full = p.full_name(),
        api_type = p.api_type(),
    );
    let inner = format!(
        "<returnval>{}{}{}{about}{}{}</returnval>",
        moref("rootFolder", "Folder", p.root_folder()),
        moref(
            "propertyCollector",
            "PropertyCollector",
            p.property_collector()
        ),
        moref("viewManager", "ViewManager", p.view_manager()),
        moref("sessionManager", "SessionManager", p.session_manager()),
        moref("searchIndex", "SearchIndex", p.search_index()),
    );
    soap::reply("RetrieveServiceContent", &inner)
}

fn login(shared: &Shared, call: &Element) -> Response {
    let user = call.child_text("userName").unwrap_or("");
    let password = call.child("password").map_or("", |p| p.text.as_str());
    if user != shared.config.username || password != shared.config.password {
        return soap::fault(
            "InvalidLogin",
            "Cannot complete login due to an incorrect user name or password.",
            "",
        );
    }
    let key = uuid::Uuid::new_v4().to_string();
    shared.lock().sessions.insert(key.clone(), user.to_string());
    let inner = format!(
        "<returnval><key>{key}</key><userName>{}</userName><fullName>{}</fullName>\
         <loginTime>2026-01-01T00:00:00Z</loginTime><lastActiveTime>2026-01-01T00:00:00Z</lastActiveTime>\
         <locale>en</locale><messageLocale>en</messageLocale><extensionSession>false</extensionSession></returnval>",
        escape(user),
        escape(user)
    );
    let mut response = soap::reply("Login", &inner);
    // vCenter quotes the value and marks it HttpOnly and Secure.
    if let Ok(cookie) = axum::http::HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}=\"{key}\"; Path=/; HttpOnly; Secure;"
    )) {
        response
            .headers_mut()
            .insert(axum::http::header::SET_COOKIE, cookie);
    }
    response
}

fn parse_uuid(raw: &str) -> Option<uuid::Uuid> {
    uuid::Uuid::parse_str(raw.trim()).ok()
}

/// The VMs whose BIOS (or, with `instanceUuid` true, instance) UUID is the one asked,
/// in the `datacenter` named (if one is); a datacenter that does not exist is
/// `Err` of its type and id (`ManagedObjectNotFound`).
fn uuid_matches<'a>(
    shared: &Shared,
    inner: &'a super::state::Inner,
    call: &Element,
) -> Result<Vec<&'a VmState>, (String, String)> {
    let scope = match call.child("datacenter") {
        None => None,
        Some(dc) => {
            let id = dc.text.trim();
            match shared.config.datacenter_named_by(id) {
                Some(name) if dc.attribute("type") == Some("Datacenter") => Some(name.to_string()),
                _ => {
                    return Err((
                        dc.attribute("type").unwrap_or("").to_string(),
                        id.to_string(),
                    ));
                }
            }
        }
    };
    let wanted = call.child_text("uuid").and_then(parse_uuid);
    let instance = call.child_text("instanceUuid") == Some("true");
    let vm_search = call.child_text("vmSearch") == Some("true");
    let Some(wanted) = wanted.filter(|_| vm_search) else {
        return Ok(Vec::new());
    };
    Ok(inner
        .vms
        .iter()
        .filter(|vm| scope.as_ref().is_none_or(|dc| vm.datacenter == *dc))
        .filter(|vm| {
            let have = if instance {
                &vm.instance_uuid
            } else {
                &vm.bios_uuid
            };
            parse_uuid(have) == Some(wanted)
        })
        .collect())
}

/// `SearchIndex.FindAllByUuid` (vSphere 6.5 and later): every match.
fn find_all_by_uuid(shared: &Shared, call: &Element) -> Response {
    let inner = shared.lock();
    let matches = match uuid_matches(shared, &inner, call) {
        Ok(m) => m,
        Err((kind, id)) => return soap::managed_object_not_found(&kind, &id),
    };
    let found: String = matches
        .iter()
        .map(|vm| moref("returnval", "VirtualMachine", &vm.moid))
        .collect();
    soap::reply("FindAllByUuid", &found)
}

fn find_by_uuid(shared: &Shared, call: &Element) -> Response {
    let inner = shared.lock();
    let matches = match uuid_matches(shared, &inner, call) {
        Ok(m) => m,
        Err((kind, id)) => return soap::managed_object_not_found(&kind, &id),
    };
    match matches.first() {
        Some(vm) => soap::reply(
            "FindByUuid",
            &moref("returnval", "VirtualMachine", &vm.moid),
        ),
        None => soap::reply("FindByUuid", ""),
    }
}

fn find_by_path(shared: &Shared, call: &Element) -> Response {
    let wanted = split_path(call.child_text("inventoryPath").unwrap_or("")).join("/");
    if let Some(dc) = shared.config.datacenter_at(&wanted) {
        return soap::reply(
            "FindByInventoryPath",
            &moref("returnval", "Datacenter", &dc),
        );
    }
    let inner = shared.lock();
    let found = inner.vms.iter().find(|vm| vm.inventory_path() == wanted);
    match found {
        Some(vm) => soap::reply(
            "FindByInventoryPath",
            &moref("returnval", "VirtualMachine", &vm.moid),
        ),
        None => soap::reply("FindByInventoryPath", ""),
    }
}

/// `ViewManager.CreateContainerView`: a view of every VM (the only `type` served)
/// under the root folder or one datacenter, named as vCenter names session-scoped
/// views.
fn create_container_view(shared: &Shared, call: &Element) -> Response {
    let wants_vms = call
        .children_named("type")
        .any(|t| t.text.trim() == "VirtualMachine");
    if !wants_vms {
        return soap::fault(
            "InvalidArgument",
            "A specified parameter was not correct: type",
            "<invalidProperty>type</invalidProperty>",
        );
    }
    let scope = match call.child("container") {
        Some(c) if c.attribute("type") == Some("Datacenter") => {
            match shared.config.datacenter_named_by(c.text.trim()) {
                Some(name) => Some(name.to_string()),
                None => return soap::managed_object_not_found("Datacenter", c.text.trim()),
            }
        }
        _ => None,
    };
    let id = format!("session[{}]vm-view", uuid::Uuid::new_v4());
    shared.lock().views.insert(id.clone(), scope);
    soap::reply(
        "CreateContainerView",
        &moref("returnval", "ContainerView", &id),
    )
}

fn prop(name: &str, xsi_type: &str, value: &str) -> String {
    format!(
        r#"<propSet><name>{}</name><val xsi:type="{xsi_type}">{}</val></propSet>"#,
        escape(name),
        escape(value)
    )
}

fn retrieve_properties(shared: &Shared, call: &Element) -> Response {
    let Some(spec) = call.child("specSet") else {
        return soap::fault("InvalidRequest", "RetrievePropertiesEx needs a specSet", "");
    };
    let paths: Vec<&str> = spec
        .children_named("propSet")
        .flat_map(|p| p.children_named("pathSet"))
        .map(|p| p.text.trim())
        .collect();
    let mut objects = String::new();
    let inner = shared.lock();
    for object in spec.children_named("objectSet") {
        let Some(obj) = object.child("obj") else {
            continue;
        };
        let kind = obj.attribute("type").unwrap_or("");
        let id = obj.text.trim();
        let mut props = String::new();
        if kind == "ContainerView" {
            // The view's `view` property traversed: every VM, the view itself
            // skipped (as fence_vmware_soap and govmomi's view package ask). A view
            // the mock did not make covers every VM.
            let scope = inner.views.get(id).cloned().flatten();
            for vm in inner
                .vms
                .iter()
                .filter(|vm| scope.as_ref().is_none_or(|dc| vm.datacenter == *dc))
            {
                let mut vm_props = String::new();
                for path in &paths {
                    match vm_property(vm, path) {
                        Some(p) => vm_props.push_str(&p),
                        None => return invalid_property(path),
                    }
                }
                objects.push_str(&format!(
                    "<objects>{}{vm_props}</objects>",
                    moref("obj", "VirtualMachine", &vm.moid)
                ));
            }
            continue;
        }
        match kind {
            "VirtualMachine" => {
                let Some(vm) = inner.vm(id) else {
                    return soap::managed_object_not_found(kind, id);
                };
                for path in &paths {
                    match vm_property(vm, path) {
                        Some(p) => props.push_str(&p),
                        None => return invalid_property(path),
                    }
                }
            }
            "Task" => {
                let Some(state) = inner.task_state(id) else {
                    return soap::managed_object_not_found(kind, id);
                };
                for path in &paths {
                    match *path {
                        "info.state" => {
                            props.push_str(&prop("info.state", "TaskInfoState", state.as_str()))
                        }
                        // Unset properties are left out of the reply.
                        "info.error" => {
                            if let TaskInfoState::Error(f) = &state {
                                let mut fields = String::new();
                                if let (Some(req), Some(existing)) =
                                    (f.requested_state, f.existing_state)
                                {
                                    fields = format!(
                                        "<requestedState>{req}</requestedState><existingState>{existing}</existingState>"
                                    );
                                }
                                props.push_str(&format!(
                                    r#"<propSet><name>info.error</name><val xsi:type="LocalizedMethodFault"><fault xsi:type="{}">{fields}</fault><localizedMessage>{}</localizedMessage></val></propSet>"#,
                                    escape(&f.fault_type),
                                    escape(&f.message)
                                ));
                            }
                        }
                        other => return invalid_property(other),
                    }
                }
            }
            _ => return soap::managed_object_not_found(kind, id),
        }
        objects.push_str(&format!(
            "<objects>{}{props}</objects>",
            moref("obj", kind, id)
        ));
    }
    if objects.is_empty() {
        // vSphere answers an empty response, no returnval, when nothing is found.
        return soap::reply("RetrievePropertiesEx", "");
    }
    soap::reply(
        "RetrievePropertiesEx",
        &format!("<returnval>{objects}</returnval>"),
    )
}

/// One property of a VM as a `propSet`; `None` for a path not served.
fn vm_property(vm: &VmState, path: &str) -> Option<String> {
    Some(match path {
        "name" => prop("name", "xsd:string", &vm.name),
        "runtime.powerState" | "summary.runtime.powerState" => {
            prop(path, "VirtualMachinePowerState", vm.power.as_str())
        }
        "config.uuid" => prop("config.uuid", "xsd:string", &vm.bios_uuid),
        "config.instanceUuid" => prop("config.instanceUuid", "xsd:string", &vm.instance_uuid),
        _ => return None,
    })
}

fn invalid_property(name: &str) -> Response {
    soap::fault(
        "InvalidProperty",
        "",
        &format!("<name>{}</name>", escape(name)),
    )
}

fn power(shared: &Shared, moid: &str, op: PowerOp) -> Response {
    let mut inner = shared.lock();
    if inner.vm(moid).is_none() {
        return soap::managed_object_not_found("VirtualMachine", moid);
    }
    if inner.faults.no_power_privilege {
        let privilege = match op {
            PowerOp::PowerOff => "VirtualMachine.Interact.PowerOff",
            PowerOp::PowerOn => "VirtualMachine.Interact.PowerOn",
        };
        return soap::fault(
            "NoPermission",
            "Permission to perform this operation was denied.",
            &format!(
                "{}<privilegeId>{privilege}</privilegeId>",
                moref("object", "VirtualMachine", moid)
            ),
        );
    }
    let task = inner.start_task(moid, op, shared.config.task_delay);
    soap::reply(op.method(), &moref("returnval", "Task", &task))
}
