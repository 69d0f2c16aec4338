//! The vSphere power driver (`driver = "vsphere"`): a VM on vCenter Server or on a
//! standalone ESXi host, through the vSphere Web Services API (SOAP, `urn:vim25`),
//! which every vCenter and ESXi version serves and which the vSphere cloud provider
//! and CSI driver use (through govmomi).
//!
//! # Which VM
//! `bios_uuid`, `instance_uuid`, `moid` or `vm_path` when set; else the Node's
//! systemUUID, which arrives through [`PowerDriver::node_identity`] ([`locate`]). With
//! `datacenter`, a UUID is looked up in that datacenter only (found once by its
//! inventory path with `FindByInventoryPath`). A UUID is looked up
//! with `SearchIndex.FindAllByUuid`: two VMs with one BIOS UUID (a clone that kept
//! it) are an error, never a guess. Before vSphere 6.5, which does not know that
//! method (an `InvalidRequest` fault, "Unable to resolve WSDL method name"), with
//! `FindByUuid`, which names the first match only, and then every VM's `config.uuid`
//! read through a container view, so that a clone is still seen. The managed object
//! id found is kept (a rename or a move does not change it) and looked up again when
//! vSphere says it no longer exists (`ManagedObjectNotFound`). A VM that cannot be
//! found is an error, never Off.
//!
//! # Power state
//! `runtime.powerState` read with `PropertyCollector.RetrievePropertiesEx`, together
//! with `config.uuid`: `poweredOff` is Off, `poweredOn` On, `suspended` Paused (a
//! suspended VM resumes with its memory: never off), anything else Unknown.
//!
//! # Commands
//! Off is `PowerOffVM_Task` (a hard power-off: no guest shutdown), on is
//! `PowerOnVM_Task`; the Task is followed until `info.state` is `success` or `error`
//! ([`tasks`]), never past the operation deadline. A task that fails with
//! `InvalidPowerState` (the VM already was in that state) is not an error: the
//! readings decide. `reboot()` is unsupported: nodefence reboots by off, confirm
//! off, on ([`crate::power::confirm::execute`]), and fencing never reboots.
//!
//! # Identity
//! [`MachineIdentity::Uuid`] of the VM's `config.uuid` from the latest reading: the
//! BIOS UUID the guest's SMBIOS carries, compared with the Node's systemUUID by
//! [`crate::identity`] (either byte order).

pub mod locate;
pub mod session;
pub mod soap;
pub mod tasks;

use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use self::locate::{VmSelector, lookup_forms, normalise_path};
use self::session::{CallError, Session, fault_error};
use self::soap::{Element, MoRef, field};
use self::tasks::{TaskOutcome, next_poll, read_task, task_of};
use crate::config::VsphereTarget;
use crate::identity::{MachineIdentity, NodeIdentity};
use crate::power::{PowerDriver, PowerError, PowerReading, PowerState};

/// `VirtualMachinePowerState` → [`PowerState`]. Only `poweredOff` is Off.
pub fn map_power_state(raw: Option<&str>) -> PowerState {
    match raw {
        Some("poweredOn") => PowerState::On,
        Some("poweredOff") => PowerState::Off,
        Some("suspended") => PowerState::Paused,
        Some(other) => PowerState::Unknown(crate::untrusted::field(other)),
        None => PowerState::Unknown(String::new()),
    }
}

/// The VM found, and what the latest reading said about its BIOS UUID.
#[derive(Debug, Clone)]
struct Found {
    vm: MoRef,
    /// `None` until read; then `config.uuid` (`None`: unset).
    uuid: Option<Option<String>>,
}

/// One VM behind one vSphere endpoint.
pub struct VsphereDriver {
    session: Arc<Session>,
    /// Set once [`PowerDriver::close`] has run (the session is detached once).
    closed: std::sync::atomic::AtomicBool,
    selector: VmSelector,
    /// `datacenter`: the inventory path of the datacenter UUID searches are limited to.
    datacenter: Option<String>,
    /// That datacenter's managed object, once found.
    datacenter_ref: Mutex<Option<MoRef>>,
    /// The Node's systemUUID, from [`PowerDriver::node_identity`].
    node_uuid: RwLock<Option<String>>,
    found: Mutex<Option<Found>>,
}

impl std::fmt::Debug for VsphereDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VsphereDriver")
            .field("sdk", &self.session.sdk().as_str())
            .field("selector", &self.selector)
            .finish_non_exhaustive()
    }
}

impl VsphereDriver {
    /// `client` carries the TLS profile; `limiter` bounds requests in flight. A
    /// session of its own; [`Self::with_session`] shares one.
    pub fn new(
        target: &VsphereTarget,
        client: reqwest::Client,
        limiter: Arc<Semaphore>,
    ) -> Result<Self, PowerError> {
        let session = Arc::new(Session::new(
            client,
            &target.endpoint,
            target.credential.clone(),
            target.timeouts,
            limiter,
        )?);
        Ok(Self::with_session(target, session))
    }

    /// A driver using `session` (the same endpoint and user: one login for every VM
    /// behind a vCenter).
    pub fn with_session(target: &VsphereTarget, session: Arc<Session>) -> Self {
        session.attach();
        Self {
            session,
            closed: std::sync::atomic::AtomicBool::new(false),
            selector: target.vm.clone(),
            datacenter: target.datacenter.clone(),
            datacenter_ref: Mutex::new(None),
            node_uuid: RwLock::new(None),
            found: Mutex::new(None),
        }
    }

    fn found(&self) -> Option<Found> {
        self.found.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn forget(&self) {
        *self.found.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The VM, found once.
    async fn vm(&self, deadline: Instant) -> Result<MoRef, PowerError> {
        if let Some(found) = self.found() {
            return Ok(found.vm);
        }
        let vm = self.locate(deadline).await?;
        tracing::debug!(sdk = %self.session.sdk(), vm = %vm, by = %self.selector, "vSphere VM found");
        *self.found.lock().unwrap_or_else(|e| e.into_inner()) = Some(Found {
            vm: vm.clone(),
            uuid: None,
        });
        Ok(vm)
    }

    async fn locate(&self, deadline: Instant) -> Result<MoRef, PowerError> {
        match &self.selector {
            VmSelector::Moid(id) => Ok(MoRef::new("VirtualMachine", id)),
            VmSelector::Path(path) => self.find_by_path(path, deadline).await,
            VmSelector::BiosUuid(uuid) => {
                self.find_by_uuid(uuid, UuidKind::Bios, "bios_uuid", deadline)
                    .await
            }
            VmSelector::InstanceUuid(uuid) => {
                self.find_by_uuid(uuid, UuidKind::Instance, "instance_uuid", deadline)
                    .await
            }
            VmSelector::NodeUuid => {
                let uuid = self
                    .node_uuid
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                match uuid {
                    Some(uuid) => {
                        self.find_by_uuid(&uuid, UuidKind::Bios, "the Node's systemUUID", deadline)
                            .await
                    }
                    None => Err(PowerError::config(
                        "which VM is not known yet: the Node reports no systemUUID; set bios_uuid, \
                         moid or vm_path for this node, or wait for the kubelet to report it",
                    )),
                }
            }
        }
    }

    async fn find_by_uuid(
        &self,
        raw: &str,
        kind: UuidKind,
        from: &str,
        deadline: Instant,
    ) -> Result<MoRef, PowerError> {
        let forms = match kind {
            // The BIOS UUID as written, then byte-swapped (see `locate`).
            UuidKind::Bios => lookup_forms(raw),
            // vCenter's own id: one byte order.
            UuidKind::Instance => uuid::Uuid::parse_str(raw.trim())
                .ok()
                .map(|u| vec![u.hyphenated().to_string()]),
        };
        let Some(forms) = forms else {
            return Err(PowerError::config(format!(
                "{from} {:?} is not a UUID",
                soap::clip(raw)
            )));
        };
        let content = self.session.content(deadline).await?;
        let datacenter = self.datacenter(deadline).await?;
        let scope = self
            .datacenter
            .as_ref()
            .map_or(String::new(), |d| format!(" in datacenter {d}"));
        let what = kind.words();
        // Every VM with either byte order of the UUID: clones that kept their
        // BIOS UUID share it, and picking one of them would be a guess.
        let mut found: Vec<MoRef> = Vec::new();
        for uuid in &forms {
            for vm in self
                .all_by_uuid(
                    &content.search_index,
                    datacenter.as_ref(),
                    uuid,
                    kind,
                    deadline,
                )
                .await?
            {
                if !found.contains(&vm) {
                    found.push(vm);
                }
            }
        }
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(PowerError::config(format!(
                "no VM on {}{scope} has {what} {} ({from}; also tried {}); check that the VM \
                 exists and the vSphere user may see it (System.View, System.Read)",
                self.session.sdk(),
                forms[0],
                forms.get(1).map_or("no other byte order", String::as_str)
            ))),
            many => Err(PowerError::config(format!(
                "{} VMs on {}{scope} have {what} {} ({from}, either byte order): {}; a cloned \
                 VM kept its UUID. nodefence will not guess: give the clone a new UUID, or \
                 set moid for this node",
                many.len(),
                self.session.sdk(),
                forms[0],
                many.iter()
                    .map(|m| m.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// `SearchIndex.FindAllByUuid` (vSphere 6.5 and later); on an older endpoint
    /// (which does not know the method, [`CallError::is_unknown_method`]),
    /// `FindByUuid`, which answers the first match only.
    async fn all_by_uuid(
        &self,
        search_index: &MoRef,
        datacenter: Option<&MoRef>,
        uuid: &str,
        kind: UuidKind,
        deadline: Instant,
    ) -> Result<Vec<MoRef>, PowerError> {
        let params = format!(
            "{}{}{}{}",
            datacenter.map_or(String::new(), |d| d.to_xml("datacenter")),
            field("uuid", uuid),
            field("vmSearch", "true"),
            field("instanceUuid", kind.instance_flag())
        );
        match self
            .session
            .call("FindAllByUuid", search_index, &params, deadline)
            .await
        {
            Ok(reply) => reply
                .children_named("returnval")
                .map(|r| match MoRef::from_element(r) {
                    Some(m) if m.kind == "VirtualMachine" => Ok(m),
                    _ => Err(PowerError::protocol(
                        "FindAllByUuid returned something that is not a VirtualMachine",
                    )),
                })
                .collect(),
            Err(e) if e.is_unknown_method("FindAllByUuid") => {
                tracing::debug!(sdk = %self.session.sdk(), "no FindAllByUuid (before vSphere 6.5): FindByUuid");
                let reply = self
                    .session
                    .call("FindByUuid", search_index, &params, deadline)
                    .await
                    .map_err(|e| e.into_error("FindByUuid"))?;
                let Some(first) = returned_vm(&reply)? else {
                    return Ok(Vec::new());
                };
                // FindByUuid names one VM even when clones share the UUID: every VM
                // with it counts, or the first one found would be a guess.
                let mut all = self.scan_by_uuid(uuid, kind, datacenter, deadline).await?;
                if !all.contains(&first) {
                    all.insert(0, first);
                }
                Ok(all)
            }
            Err(e) => {
                if e.fault_type() == Some("ManagedObjectNotFound") {
                    // The datacenter may have been removed and made again: found anew.
                    *self
                        .datacenter_ref
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = None;
                }
                Err(e.into_error("FindAllByUuid"))
            }
        }
    }

    /// The datacenter UUID searches are limited to (`None`: no `datacenter` set),
    /// found once by its inventory path.
    async fn datacenter(&self, deadline: Instant) -> Result<Option<MoRef>, PowerError> {
        let Some(path) = &self.datacenter else {
            return Ok(None);
        };
        if let Some(known) = self
            .datacenter_ref
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Ok(Some(known));
        }
        let content = self.session.content(deadline).await?;
        let path = normalise_path(path);
        let reply = self
            .session
            .call(
                "FindByInventoryPath",
                &content.search_index,
                &field("inventoryPath", &path),
                deadline,
            )
            .await
            .map_err(|e| e.into_error("FindByInventoryPath (datacenter)"))?;
        let found = match reply.child("returnval").map(MoRef::from_element) {
            None => {
                return Err(PowerError::config(format!(
                    "no datacenter at inventory path {path:?} on {} (datacenter is its name, \
                     or Folder/Name when it sits in a folder)",
                    self.session.sdk()
                )));
            }
            Some(Some(m)) if m.kind == "Datacenter" => m,
            Some(Some(m)) => {
                return Err(PowerError::config(format!(
                    "datacenter {path:?} on {} is {m}, not a Datacenter",
                    self.session.sdk()
                )));
            }
            Some(None) => {
                return Err(PowerError::protocol(
                    "the search returned a reference without type or id",
                ));
            }
        };
        *self
            .datacenter_ref
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(found.clone());
        Ok(Some(found))
    }

    /// Every VM whose `config.uuid` is `uuid` (as vSphere compares: the UUID's value,
    /// not its spelling), read through a container view of every VM under the root
    /// folder: what `FindAllByUuid` answers, for an endpoint without it. A reply cut
    /// into pages (a `token`) is an error: a VM left unread could share the UUID.
    async fn scan_by_uuid(
        &self,
        uuid: &str,
        kind: UuidKind,
        datacenter: Option<&MoRef>,
        deadline: Instant,
    ) -> Result<Vec<MoRef>, PowerError> {
        let content = self.session.content(deadline).await?;
        let root = datacenter.or(content.root_folder.as_ref());
        let (Some(root), Some(views)) = (root, &content.view_manager) else {
            return Err(PowerError::protocol(
                "the endpoint names no rootFolder or viewManager: the VMs sharing a UUID \
                 cannot be counted without FindAllByUuid; set moid for this node",
            ));
        };
        let reply = self
            .session
            .call(
                "CreateContainerView",
                views,
                &format!(
                    "{}{}{}",
                    root.to_xml("container"),
                    field("type", "VirtualMachine"),
                    field("recursive", "true")
                ),
                deadline,
            )
            .await
            .map_err(|e| e.into_error("CreateContainerView"))?;
        let view = reply
            .child("returnval")
            .and_then(MoRef::from_element)
            .ok_or_else(|| PowerError::protocol("CreateContainerView returned no view"))?;
        let params = format!(
            "<specSet><propSet>{}{}{}</propSet><objectSet>{}{}<selectSet xsi:type=\"TraversalSpec\">{}{}{}{}</selectSet></objectSet></specSet><options></options>",
            field("type", "VirtualMachine"),
            field("all", "false"),
            field("pathSet", kind.property()),
            view.to_xml("obj"),
            field("skip", "true"),
            field("name", "traverseView"),
            field("type", "ContainerView"),
            field("path", "view"),
            field("skip", "false"),
        );
        let read = self
            .session
            .call(
                "RetrievePropertiesEx",
                &content.property_collector,
                &params,
                deadline,
            )
            .await;
        // The view is the session's; it goes with the session if this fails.
        if let Err(e) = self.session.call("DestroyView", &view, "", deadline).await {
            tracing::debug!(view = %view, "DestroyView: {}", e.into_error("DestroyView"));
        }
        let reply =
            read.map_err(|e| e.into_error(&format!("reading every VM's {}", kind.property())))?;
        let returned = reply.child("returnval");
        if returned.and_then(|r| r.child("token")).is_some() {
            return Err(PowerError::protocol(
                "the VMs' UUIDs came back in pages: nodefence does not read them page by page, \
                 and will not guess from the first; set moid for this node",
            ));
        }
        let wanted = uuid::Uuid::parse_str(uuid).ok();
        let mut found = Vec::new();
        for object in returned
            .into_iter()
            .flat_map(|r| r.children_named("objects"))
        {
            let Some(vm) = object.child("obj").and_then(MoRef::from_element) else {
                continue;
            };
            let same = object.children_named("propSet").any(|p| {
                p.child_text("name") == Some(kind.property())
                    && p.child("val")
                        .and_then(|v| uuid::Uuid::parse_str(v.text.trim()).ok())
                        .is_some_and(|u| Some(u) == wanted)
            });
            if same && vm.kind == "VirtualMachine" && !found.contains(&vm) {
                found.push(vm);
            }
        }
        Ok(found)
    }

    async fn find_by_path(&self, path: &str, deadline: Instant) -> Result<MoRef, PowerError> {
        let content = self.session.content(deadline).await?;
        let path = normalise_path(path);
        let reply = self
            .session
            .call(
                "FindByInventoryPath",
                &content.search_index,
                &field("inventoryPath", &path),
                deadline,
            )
            .await
            .map_err(|e| e.into_error("FindByInventoryPath"))?;
        returned_vm(&reply)?.ok_or_else(|| {
            PowerError::config(format!(
                "no VM at inventory path {path:?} on {} (renamed or moved?); vm_path is \
                 <datacenter>/vm/<folders>/<name>; bios_uuid (or the Node's systemUUID) finds \
                 a VM wherever it is",
                self.session.sdk()
            ))
        })
    }

    /// `RetrievePropertiesEx` of `paths` of `obj`.
    async fn properties(
        &self,
        obj: &MoRef,
        paths: &[&str],
        deadline: Instant,
    ) -> Result<Element, CallError> {
        let content = self
            .session
            .content(deadline)
            .await
            .map_err(CallError::Other)?;
        let path_set: String = paths.iter().map(|p| field("pathSet", p)).collect();
        let params = format!(
            "<specSet><propSet>{}{}{path_set}</propSet><objectSet>{}{}</objectSet></specSet><options></options>",
            field("type", &obj.kind),
            field("all", "false"),
            obj.to_xml("obj"),
            field("skip", "false"),
        );
        self.session
            .call(
                "RetrievePropertiesEx",
                &content.property_collector,
                &params,
                deadline,
            )
            .await
    }

    /// Reads the VM's power state and BIOS UUID, finding it again once when
    /// vSphere says the object it had is gone.
    async fn read_state(&self, deadline: Instant) -> Result<PowerState, PowerError> {
        let mut located_again = false;
        loop {
            let vm = self.vm(deadline).await?;
            match self
                .properties(&vm, &["runtime.powerState", "config.uuid"], deadline)
                .await
            {
                Ok(reply) => {
                    let (state, uuid) = read_vm(&reply, &vm)?;
                    if let Some(found) = self
                        .found
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .as_mut()
                        .filter(|f| f.vm == vm)
                    {
                        found.uuid = Some(uuid);
                    }
                    return Ok(state);
                }
                Err(e) if e.fault_type() == Some("ManagedObjectNotFound") => {
                    self.forget();
                    if located_again || matches!(self.selector, VmSelector::Moid(_)) {
                        return Err(PowerError::config(format!(
                            "VM {vm} does not exist on {} ({}); it was removed or the moid is \
                             wrong. nodefence never counts a VM it cannot find as off",
                            self.session.sdk(),
                            self.selector
                        )));
                    }
                    located_again = true;
                }
                Err(e) => return Err(e.into_error(&format!("reading VM {vm}"))),
            }
        }
    }

    async fn command(&self, operation: &'static str) -> Result<(), PowerError> {
        let deadline = self.session.deadline();
        let vm = self.vm(deadline).await?;
        tracing::info!(sdk = %self.session.sdk(), vm = %vm, operation, "sending vSphere power command");
        let reply = match self.session.call(operation, &vm, "", deadline).await {
            Ok(r) => r,
            Err(e) => {
                if e.fault_type() == Some("ManagedObjectNotFound") {
                    self.forget();
                }
                return Err(e.into_error(&format!("{operation} {vm}")));
            }
        };
        let Some(task) = task_of(&reply) else {
            return Err(PowerError::protocol(format!(
                "{operation} {vm}: the reply names no Task"
            )));
        };
        self.follow(operation, &vm, &task, deadline).await
    }

    async fn follow(
        &self,
        operation: &str,
        vm: &MoRef,
        task: &MoRef,
        deadline: Instant,
    ) -> Result<(), PowerError> {
        loop {
            let reply = self
                .properties(task, &["info.state", "info.error"], deadline)
                .await
                .map_err(|e| e.into_error(&format!("reading {task} of {operation} {vm}")))?;
            let outcome = read_task(&reply)
                .map_err(|m| PowerError::protocol(format!("{task} of {operation} {vm}: {m}")))?;
            match outcome {
                TaskOutcome::Success => return Ok(()),
                TaskOutcome::Error { fault_type, .. } if fault_type == "InvalidPowerState" => {
                    tracing::info!(vm = %vm, operation, "the VM already was in the requested power state; the readings decide");
                    return Ok(());
                }
                TaskOutcome::Error {
                    fault_type,
                    message,
                } => {
                    return Err(fault_error(
                        &format!("{task} of {operation} {vm} ended in error"),
                        &soap::Fault {
                            fault_type,
                            message,
                        },
                    ));
                }
                TaskOutcome::Pending(state) => match next_poll(deadline) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => {
                        return Err(PowerError::unreachable(format!(
                            "{task} of {operation} {vm} still {state} at the operation deadline"
                        )));
                    }
                },
            }
        }
    }
}

/// Which UUID of a VM a search compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UuidKind {
    /// `config.uuid`, the BIOS UUID the guest (and the Node) reports.
    Bios,
    /// `config.instanceUuid`, vCenter's own id of the VM.
    Instance,
}

impl UuidKind {
    fn property(self) -> &'static str {
        match self {
            UuidKind::Bios => "config.uuid",
            UuidKind::Instance => "config.instanceUuid",
        }
    }

    fn instance_flag(self) -> &'static str {
        match self {
            UuidKind::Bios => "false",
            UuidKind::Instance => "true",
        }
    }

    fn words(self) -> &'static str {
        match self {
            UuidKind::Bios => "BIOS UUID",
            UuidKind::Instance => "instance UUID",
        }
    }
}

/// The VM a `FindByUuid`/`FindByInventoryPath` reply names (`None`: not found).
fn returned_vm(reply: &Element) -> Result<Option<MoRef>, PowerError> {
    let Some(returned) = reply.child("returnval") else {
        return Ok(None);
    };
    match MoRef::from_element(returned) {
        Some(m) if m.kind == "VirtualMachine" => Ok(Some(m)),
        Some(m) => Err(PowerError::protocol(format!(
            "the search returned {m}, which is not a VirtualMachine"
        ))),
        None => Err(PowerError::protocol(
            "the search returned a reference without type or id",
        )),
    }
}

/// The power state and `config.uuid` of `vm` in a `RetrievePropertiesEx` reply.
fn read_vm(reply: &Element, vm: &MoRef) -> Result<(PowerState, Option<String>), PowerError> {
    let object = reply
        .child("returnval")
        .into_iter()
        .flat_map(|r| r.children_named("objects"))
        .find(|o| o.child("obj").and_then(MoRef::from_element).as_ref() == Some(vm))
        .ok_or_else(|| PowerError::protocol(format!("the reply does not hold VM {vm}")))?;
    let mut state = None;
    let mut uuid = None;
    for prop in object.children_named("propSet") {
        let value = prop.child("val").map(|v| v.text.trim().to_string());
        match prop.child_text("name") {
            Some("runtime.powerState") => state = value,
            Some("config.uuid") => uuid = value.filter(|u| !u.is_empty()),
            _ => {}
        }
    }
    Ok((map_power_state(state.as_deref()), uuid))
}

#[async_trait]
impl PowerDriver for VsphereDriver {
    fn driver_name(&self) -> &'static str {
        "vsphere"
    }

    fn endpoint(&self) -> String {
        let sdk = self.session.sdk().as_str().to_string();
        match (&self.selector, self.found()) {
            (VmSelector::NodeUuid, Some(f)) => {
                format!("{sdk} ({}, by the Node's systemUUID)", f.vm.id)
            }
            (VmSelector::NodeUuid, None) => format!("{sdk} (VM by the Node's systemUUID)"),
            (selector, _) => format!("{sdk} ({selector})"),
        }
    }

    async fn status(&self) -> Result<PowerReading, PowerError> {
        let started = Instant::now();
        let state = self.read_state(self.session.deadline()).await?;
        Ok(PowerReading {
            state,
            at: crate::clock::now(),
            latency: started.elapsed(),
        })
    }

    async fn power_off(&self) -> Result<(), PowerError> {
        self.command("PowerOffVM_Task").await
    }

    async fn power_on(&self) -> Result<(), PowerError> {
        self.command("PowerOnVM_Task").await
    }

    async fn reboot(&self) -> Result<(), PowerError> {
        Err(PowerError::unsupported(
            "the vsphere driver does not send ResetVM_Task (its off phase cannot be observed); \
             nodefence reboots a VM by powering it off, confirming it is off, and powering it on",
        ))
    }

    async fn machine_identity(&self) -> Result<MachineIdentity, PowerError> {
        let known = self.found().and_then(|f| f.uuid);
        let uuid = match known {
            Some(uuid) => uuid,
            None => {
                self.read_state(self.session.deadline()).await?;
                self.found().and_then(|f| f.uuid).flatten()
            }
        };
        Ok(match uuid {
            Some(uuid) => MachineIdentity::Uuid(uuid),
            None => MachineIdentity::Unavailable(
                "the VM reports no config.uuid (its configuration is not available)".into(),
            ),
        })
    }

    fn node_identity(&self, node: &NodeIdentity) {
        let mut current = self.node_uuid.write().unwrap_or_else(|e| e.into_inner());
        if *current != node.system_uuid {
            *current = node.system_uuid.clone();
            if self.selector == VmSelector::NodeUuid {
                self.forget();
            }
        }
    }

    async fn close(&self) {
        if !self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.session.detach().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_powered_off_is_off() {
        let cases = [
            (Some("poweredOff"), PowerState::Off),
            (Some("poweredOn"), PowerState::On),
            (Some("suspended"), PowerState::Paused),
            (Some("PoweredOff"), PowerState::Unknown("PoweredOff".into())),
            (Some(""), PowerState::Unknown(String::new())),
            (None, PowerState::Unknown(String::new())),
        ];
        for (raw, want) in cases {
            let got = map_power_state(raw);
            assert_eq!(got, want, "{raw:?}");
            assert_eq!(got.is_off(), raw == Some("poweredOff"));
        }
    }

    #[test]
    fn a_reading_belongs_to_the_vm_asked_about() {
        let reply = soap::parse(
            r#"<RetrievePropertiesExResponse><returnval><objects><obj type="VirtualMachine">vm-7</obj><propSet><name>runtime.powerState</name><val>poweredOff</val></propSet></objects></returnval></RetrievePropertiesExResponse>"#,
        )
        .unwrap_or_default();
        let ours = MoRef::new("VirtualMachine", "vm-42");
        assert!(
            read_vm(&reply, &ours).is_err(),
            "another VM's Off is not ours"
        );
        let theirs = MoRef::new("VirtualMachine", "vm-7");
        assert_eq!(read_vm(&reply, &theirs).ok(), Some((PowerState::Off, None)));
    }
}
