//! The kubeconfig clients use to reach a fake API server.
//!
//! kubectl, kube-rs and nodefence itself all take a kubeconfig, so tests hand them
//! one exactly as an administrator would: server URL, the CA to verify it with
//! (`certificate-authority-data`, never `insecure-skip-tls-verify`), a bearer
//! token, and a context `fake-kube` with namespace `default`. Scalars are written
//! as double-quoted YAML (JSON string syntax), so no value can break the document.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The name of the cluster, user and context.
pub const CONTEXT: &str = "fake-kube";

fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// A kubeconfig for `server`, trusting `ca_pem` (HTTPS) and presenting `token`.
pub fn render(server: &str, ca_pem: Option<&str>, token: &str) -> String {
    let ca = ca_pem.map_or_else(String::new, |pem| {
        format!(
            "    certificate-authority-data: {}\n",
            quoted(&STANDARD.encode(pem))
        )
    });
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {CONTEXT}\n  \
           cluster:\n    \
             server: {server}\n\
         {ca}\
         users:\n\
         - name: {CONTEXT}\n  \
           user:\n    \
             token: {token}\n\
         contexts:\n\
         - name: {CONTEXT}\n  \
           context:\n    \
             cluster: {CONTEXT}\n    \
             user: {CONTEXT}\n    \
             namespace: default\n\
         current-context: {CONTEXT}\n\
         preferences: {{}}\n",
        server = quoted(server),
        token = quoted(token),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let k = render("https://localhost:1", Some("PEM"), "t\"ok");
        assert!(k.contains("    server: \"https://localhost:1\"\n"));
        assert!(k.contains(&format!(
            "    certificate-authority-data: \"{}\"\n",
            STANDARD.encode("PEM")
        )));
        assert!(k.contains("    token: \"t\\\"ok\"\n"));
        assert!(k.contains("current-context: fake-kube\n"));
        assert!(k.contains("    namespace: default\n"));
        assert!(!render("http://127.0.0.1:1", None, "t").contains("certificate-authority"));
    }
}
