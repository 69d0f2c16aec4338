//! Secrets never leak: not in `Debug` of the config, not in errors, not in warnings.

use super::*;

/// Checks `Display` and `Debug` of every error for every secret.
fn assert_no_leak(result: Result<Config, ConfigErrors>, secrets: &[&str]) {
    let text = match &result {
        Ok(config) => format!("{config:?}\n{config:#?}\n{}", config.warnings.join("\n")),
        Err(errs) => format!("{errs}\n{errs:?}"),
    };
    for secret in secrets {
        assert!(!text.contains(secret), "{secret:?} leaked into:\n{text}");
    }
}

#[test]
fn debug_of_a_loaded_config_shows_no_password() {
    let f = Fixture::new();
    f.agent("inventory = \"inventory.toml\"\n[security]\nallow_inline_passwords = true\n");
    let inv = format!(
        "{DEFAULTS}[nodes.a]\nendpoint = \"https://a\"\n\
         [nodes.b]\nendpoint = \"https://b\"\npassword_env = \"RACK_A_BMC_PASSWORD\"\n\
         [nodes.c]\nendpoint = \"https://c\"\npassword = \"inline-pw-5e1f\"\n\
         [nodes.d]\ndriver = \"ipmi\"\naddress = \"d\"\n"
    );
    let result = f.load(&inv);
    let config = result.as_ref().expect("loads");
    assert_eq!(config.inventory.nodes.len(), 4);
    let debug = format!("{config:?}");
    assert!(debug.contains("REDACTED"), "{debug}");
    assert_no_leak(result, &[FILE_PASSWORD, ENV_PASSWORD, "inline-pw-5e1f"]);
}

#[test]
fn an_inline_password_that_is_not_allowed_is_not_echoed() {
    let errs = Fixture::new().load(
        "[nodes.a]\ndriver = \"redfish\"\nendpoint = \"https://a\"\nusername = \"u\"\npassword = \"inline-pw-77aa\"\n",
    );
    let e = errs.as_ref().expect_err("refused");
    let refused = find(&e.0, "inline `password` is refused");
    assert_at(refused, Some("a"), 5, "password");
    assert!(
        refused
            .help
            .as_deref()
            .unwrap()
            .contains("allow_inline_passwords = true")
    );
    assert_no_leak(errs, &["inline-pw-77aa"]);
}

#[test]
fn a_password_of_the_wrong_type_is_not_echoed() {
    let result = Fixture::new().load(
        "[nodes.a]\ndriver = \"redfish\"\nendpoint = \"https://a\"\nusername = \"u\"\npassword = 8675309\n\
         [nodes.b]\ndriver = \"redfish\"\nendpoint = \"https://b\"\nusername = \"u\"\npassword = { v = \"tbl-pw-31\" }\n\
         [nodes.c]\ndriver = \"redfish\"\nendpoint = \"https://c\"\nusername = \"u\"\npassword = [\"arr-pw-32\"]\n",
    );
    let errs = result.as_ref().expect_err("wrong types");
    assert_at(
        find(&errs.0, "found integer"),
        Some("a"),
        5,
        "`password` must be a string",
    );
    assert_no_leak(result, &["8675309", "tbl-pw-31", "arr-pw-32"]);
}

#[test]
fn an_endpoint_with_userinfo_is_refused_without_echoing_it() {
    let result = Fixture::new().load(&format!(
        "{DEFAULTS}[groups.g]\nendpoint = \"https://root:calvin-pw-1@{{node}}-bmc\"\n\
         [nodes.a]\ngroup = \"g\"\n[nodes.b]\nendpoint = \"https://admin:calvin-pw-2@b-bmc/\"\n"
    ));
    let errs = result.as_ref().expect_err("userinfo");
    let group = errs
        .iter()
        .find(|e| e.line == Some(6))
        .expect("group error");
    assert!(
        group
            .message
            .contains("group \"g\": `endpoint` must not contain a user name"),
        "{group}"
    );
    let node = errs
        .iter()
        .find(|e| e.node.as_deref() == Some("b") && e.message.contains("user name"))
        .expect("node error");
    assert!(node.help.as_deref().unwrap().contains("password_file"));
    // Not also "needs `endpoint`": the endpoint was there, only invalid.
    assert!(
        !errs
            .iter()
            .any(|e| e.node.as_deref() == Some("b") && e.message.contains("needs"))
    );
    assert_no_leak(result, &["calvin-pw", "root:", "admin:"]);
}

#[test]
fn syntax_and_duplicate_key_errors_do_not_quote_password_lines() {
    for inv in [
        "[nodes.a]\npassword = \"unterminated-pw-41\n",
        "[nodes.a]\npassword = \"dup-pw-42a\"\npassword = \"dup-pw-42b\"\n",
        "[nodes.a]\npassword = unquoted-pw-43\n",
        "[nodes.a]\npasswrd = \"typo-pw-44\"\n",
    ] {
        let result = Fixture::new().load(inv);
        assert!(result.is_err(), "{inv}");
        assert_no_leak(result, &["pw-4"]);
    }
}

#[test]
fn a_password_put_into_password_env_is_not_echoed() {
    let result = Fixture::new().load(
        "[nodes.a]\ndriver = \"redfish\"\nendpoint = \"https://a\"\nusername = \"u\"\npassword_env = \"S3cret!pw-51\"\n",
    );
    let errs = result.as_ref().expect_err("not a variable name");
    assert!(
        errs.iter()
            .any(|e| e.message.contains("not an environment variable name"))
    );
    assert_no_leak(result, &["S3cret", "pw-51"]);
}

#[test]
fn ipmi_length_errors_do_not_echo_the_password() {
    let f = Fixture::new().env("IPMI_PW", "ipmi-password-too-long-61");
    let result = f.load(
        "[nodes.a]\ndriver = \"ipmi\"\naddress = \"a\"\nusername = \"u\"\npassword_env = \"IPMI_PW\"\n",
    );
    assert!(result.is_err());
    assert_no_leak(result, &["too-long-61"]);
}

#[test]
fn warnings_about_inline_passwords_do_not_echo_them() {
    let f = Fixture::new();
    f.agent("inventory = \"inventory.toml\"\n[security]\nallow_inline_passwords = true\n");
    let result = f.load(
        "[nodes.a]\ndriver = \"redfish\"\nendpoint = \"https://a\"\nusername = \"u\"\npassword = \"inline-pw-71\"\n",
    );
    let config = result.as_ref().expect("allowed");
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0].contains("inline `password`"),
        "{:?}",
        config.warnings
    );
    assert!(
        config.warnings[0].contains(":5:1: node \"a\": "),
        "{:?}",
        config.warnings
    );
    assert_no_leak(result, &["inline-pw-71"]);
}
