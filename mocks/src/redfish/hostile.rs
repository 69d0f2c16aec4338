//! [`Fault::HostileStrings`](super::Fault::HostileStrings): a BMC that puts terminal
//! control sequences in every string a client might print. Applied to the JSON of a
//! reply just before it is sent, so every resource and every error carries it.

use serde_json::Value;

use super::faults::HOSTILE;

/// Puts [`HOSTILE`] into the printable fields of a reply body.
pub(crate) fn taint(value: &mut Value) {
    let Value::Object(m) = value else { return };
    if let Some(Value::Object(error)) = m.get_mut("error") {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        error.insert(
            "message".into(),
            Value::String(format!("{HOSTILE}{message}")),
        );
        if let Some(Value::Array(infos)) = error.get_mut("@Message.ExtendedInfo") {
            for info in infos.iter_mut().filter_map(Value::as_object_mut) {
                info.insert("Message".into(), Value::String(HOSTILE.into()));
                info.insert("Resolution".into(), Value::String(HOSTILE.into()));
            }
        }
    }
    let odata_type = m
        .get("@odata.type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if odata_type.contains("ComputerSystem.") {
        for field in [
            "PowerState",
            "UUID",
            "Name",
            "Manufacturer",
            "Model",
            "SerialNumber",
        ] {
            m.insert(field.into(), Value::String(HOSTILE.into()));
        }
        if let Some(Value::Array(values)) = m
            .get_mut("Actions")
            .and_then(|a| a.get_mut("#ComputerSystem.Reset"))
            .and_then(|r| r.get_mut("ResetType@Redfish.AllowableValues"))
        {
            values.push(Value::String(HOSTILE.into()));
        }
    }
    if odata_type.contains("ActionInfo.")
        && let Some(Value::Array(params)) = m.get_mut("Parameters")
    {
        for p in params.iter_mut() {
            if let Some(Value::Array(values)) = p.get_mut("AllowableValues") {
                values.push(Value::String(HOSTILE.into()));
            }
        }
    }
    if odata_type.contains("Task.")
        && let Some(Value::Array(messages)) = m.get_mut("Messages")
    {
        for msg in messages.iter_mut().filter_map(Value::as_object_mut) {
            msg.insert("Message".into(), Value::String(HOSTILE.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_and_systems_carry_it_and_ids_stay_clean() {
        let mut error = json!({"error": {"code": "Base.1.8.GeneralError", "message": "x",
            "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.GeneralError", "Message": "m"}]}});
        taint(&mut error);
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(HOSTILE)
        );
        assert_eq!(
            error["error"]["@Message.ExtendedInfo"][0]["Message"],
            HOSTILE
        );
        assert_eq!(error["error"]["code"], "Base.1.8.GeneralError");

        let mut system = json!({"@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
            "@odata.id": "/redfish/v1/Systems/1", "Id": "1", "PowerState": "On",
            "Actions": {"#ComputerSystem.Reset": {"ResetType@Redfish.AllowableValues": ["On"]}}});
        taint(&mut system);
        assert_eq!(system["PowerState"], HOSTILE);
        assert_eq!(system["UUID"], HOSTILE);
        assert_eq!(system["Id"], "1");
        assert_eq!(system["@odata.id"], "/redfish/v1/Systems/1");
        assert_eq!(
            system["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"][1],
            HOSTILE
        );
    }
}
