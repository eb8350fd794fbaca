//! Authentication (basic and `ApiKey`) and index-pattern authorization.

use base64::Engine as _;

use crate::config::Config;
use crate::error::{Error, Result};

/// Who sent a request, and which indices they may read and write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user name or API key id; `_anonymous` without security.
    pub name: String,
    /// Index name patterns; `None` allows every index.
    patterns: Option<Vec<String>>,
}

impl Principal {
    /// The principal of a server without security: every index allowed.
    pub fn anonymous() -> Principal {
        Principal {
            name: "_anonymous".to_owned(),
            patterns: None,
        }
    }

    /// Whether this principal may use index `name`.
    pub fn allows(&self, name: &str) -> bool {
        match &self.patterns {
            None => true,
            Some(p) => p.iter().any(|pat| glob_match(pat, name)),
        }
    }

    /// Checks [`allows`](Self::allows), as Elasticsearch's `403 security_exception`.
    ///
    /// # Errors
    /// [`Error::Request`] (403).
    pub fn check(&self, index: &str) -> Result<()> {
        if self.allows(index) {
            Ok(())
        } else {
            Err(self.forbidden(index))
        }
    }

    /// The `403` for index `index`.
    pub fn forbidden(&self, index: &str) -> Error {
        Error::status(
            403,
            "security_exception",
            format!(
                "action [indices:data] is unauthorized for user [{}] on indices [{index}], this action is granted by the index privileges [all]",
                self.name
            ),
        )
    }
}

/// Authenticates the `Authorization` header value against `config`.
///
/// # Errors
/// `401 security_exception` when security is on and the credentials are missing or
/// wrong.
pub fn authenticate(config: &Config, header: Option<&[u8]>) -> Result<Principal> {
    if !config.security_enabled() {
        return Ok(Principal::anonymous());
    }
    let unauthorized = |why: &str| {
        Error::status(
            401,
            "security_exception",
            format!("unable to authenticate {why}"),
        )
    };
    let Some(header) = header else {
        return Err(unauthorized(
            "the request: missing authentication credentials for REST request",
        ));
    };
    let text = std::str::from_utf8(header).map_err(|_| unauthorized("the request"))?;
    let (scheme, rest) = text.split_once(' ').unwrap_or((text, ""));
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| unauthorized("the request: credentials are not base64"))?;
    let (id, secret) = decoded
        .split_once(':')
        .ok_or_else(|| unauthorized("the request: expected id:secret"))?;
    if scheme.eq_ignore_ascii_case("basic") {
        let user = config
            .users
            .iter()
            .find(|u| u.name == id && constant_time_eq(u.password.as_bytes(), secret.as_bytes()));
        match user {
            Some(u) => Ok(Principal {
                name: u.name.clone(),
                patterns: Some(u.indices.clone()),
            }),
            None => Err(unauthorized(&format!("user [{id}] for REST request"))),
        }
    } else if scheme.eq_ignore_ascii_case("apikey") {
        let key = config
            .api_keys
            .iter()
            .find(|k| k.id == id && constant_time_eq(k.key.as_bytes(), secret.as_bytes()));
        match key {
            Some(k) => Ok(Principal {
                name: k.id.clone(),
                patterns: Some(k.indices.clone()),
            }),
            None => Err(unauthorized(&format!("API key [{id}]"))),
        }
    } else {
        Err(unauthorized(
            "the request: expected Basic or ApiKey credentials",
        ))
    }
}

/// Compares secrets without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Matches `name` against `pattern`, where `*` stands for any run of characters
/// (Elasticsearch's index patterns).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if Some(&c) == n.get(ni) => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ApiKey, User};

    #[test]
    fn glob_matches_like_index_patterns() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("metrics-*", "metrics-system.cpu-default"));
        assert!(glob_match("metrics-*-default", "metrics-a-default"));
        assert!(!glob_match("metrics-*-default", "metrics-a-prod"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("logs-*", "metrics-x"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    fn secured() -> Config {
        Config {
            users: vec![User {
                name: "alice".into(),
                password: "pw".into(),
                indices: vec!["a-*".into()],
            }],
            api_keys: vec![ApiKey {
                id: "k".into(),
                key: "s3".into(),
                indices: vec!["b-*".into()],
            }],
            ..Config::default()
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn basic_and_api_key_scope_indices() {
        let c = secured();
        let alice =
            authenticate(&c, Some(format!("Basic {}", b64("alice:pw")).as_bytes())).unwrap();
        assert!(alice.allows("a-1") && !alice.allows("b-1"));
        let key = authenticate(&c, Some(format!("ApiKey {}", b64("k:s3")).as_bytes())).unwrap();
        assert!(key.allows("b-1") && !key.allows("a-1"));
        assert_eq!(key.check("a-1").unwrap_err().status_and_kind().0, 403);
    }

    #[test]
    fn wrong_or_missing_credentials_are_401() {
        let c = secured();
        for h in [
            None,
            Some(format!("Basic {}", b64("alice:wrong"))),
            Some(format!("ApiKey {}", b64("k:nope"))),
            Some("Bearer xyz".to_owned()),
            Some("Basic !!!".to_owned()),
        ] {
            let e = authenticate(&c, h.as_deref().map(str::as_bytes)).unwrap_err();
            assert_eq!(e.status_and_kind(), (401, "security_exception"));
        }
        assert!(authenticate(&Config::default(), None).is_ok());
    }
}
