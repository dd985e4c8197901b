//! The secrets the tool host hands to its servers, and their removal from everything a server
//! sends back. A server that echoes its credentials (in an error, a result or a tool's
//! description) must not get them shown, saved in a chat, fed to the model or sent to a remote
//! LLM server inside a `tool` message: each is replaced by [`REDACTED`] before the text leaves
//! the host.
//!
//! Secrets are the values of `headers_env` variables, every header value as sent, and what a
//! `${VAR}` reference in `headers` or `env` expands to, read from the same environment the
//! servers are started with.

use serde_json::Value;

use crate::config::{ToolsConfig, substitute};

/// What a secret becomes in text.
pub const REDACTED: &str = "[secret]";

/// Shortest value taken for a secret: shorter ones (`1`, `true`, `dev`) are everywhere in
/// ordinary text and would be mangled, not protected.
pub const MIN_SECRET: usize = 8;

/// The secrets of a configuration, longest first (so that a secret inside another is not
/// replaced first and leaves the rest of the longer one behind).
#[derive(Debug, Clone, Default)]
pub struct Secrets(Vec<String>);

impl Secrets {
    /// The secrets `config` hands to its servers, read from `env`.
    pub fn of(config: &ToolsConfig, env: &dyn Fn(&str) -> Option<String>) -> Self {
        let found = std::cell::RefCell::new(Vec::new());
        let recording = |name: &str| {
            let value = env(name);
            found.borrow_mut().extend(value.clone());
            value
        };
        for server in config.servers.values() {
            for var in server.headers_env.values() {
                found.borrow_mut().extend(env(var));
            }
            for value in server.headers.values() {
                if let Ok(sent) = substitute(value, &recording) {
                    found.borrow_mut().push(sent);
                }
            }
            for value in server.env.values() {
                let _ = substitute(value, &recording);
            }
        }
        let mut all = found.into_inner();
        all.retain(|s| s.trim().len() >= MIN_SECRET);
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
        all.dedup();
        Self(all)
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// Every string in `value` (keys too) redacted.
    pub fn redact_json(&self, value: &mut Value) {
        match value {
            Value::String(s) => *s = self.redact(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    self.redact_json(&mut v);
                    map.insert(self.redact(&k), v);
                }
            }
            _ => {}
        }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;

    #[test]
    fn every_value_handed_to_a_server_is_a_secret_and_is_taken_out() {
        let mut http = ServerConfig {
            url: Some("http://127.0.0.1:1/mcp".into()),
            ..ServerConfig::default()
        };
        http.headers_env
            .insert("Authorization".into(), "GC_AUTH".into());
        http.headers
            .insert("X-Client".into(), "probe${GC_SECRET}".into());
        let mut stdio = ServerConfig {
            command: Some("srv".into()),
            ..ServerConfig::default()
        };
        stdio.env.insert("KEY".into(), "${GC_KEY}".into());
        stdio.env.insert("LEVEL".into(), "${GC_SHORT}".into());
        let mut config = ToolsConfig::default();
        config.servers.insert("w".into(), http);
        config.servers.insert("s".into(), stdio);
        let env = |k: &str| match k {
            "GC_AUTH" => Some("Bearer-SECRETHTTPKEY".to_string()),
            "GC_SECRET" => Some("topsecretvalue".to_string()),
            "GC_KEY" => Some("sk-0123456789".to_string()),
            "GC_SHORT" => Some("debug".to_string()),
            _ => None,
        };
        let s = Secrets::of(&config, &env);
        let text = "bad token Bearer-SECRETHTTPKEY for probetopsecretvalue; key sk-0123456789 \
                    (topsecretvalue) at level debug";
        assert_eq!(
            s.redact(text),
            "bad token [secret] for [secret]; key [secret] ([secret]) at level debug"
        );
        let mut v = serde_json::json!({"e": ["x sk-0123456789"], "sk-0123456789": 1});
        s.redact_json(&mut v);
        assert_eq!(v, serde_json::json!({"e": ["x [secret]"], "[secret]": 1}));
    }
}
