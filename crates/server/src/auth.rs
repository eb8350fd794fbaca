//! Authentication (`Basic`, `ApiKey`, InfluxDB `Token`, `Bearer`, InfluxDB 1.x `u`/`p`
//! query parameters) and index-pattern authorization.

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

    /// The principal of a listener whose protocol has no authentication (Graphite,
    /// OpenTSDB over TCP): `name` (`_graphite`), allowed the one index it writes.
    pub(crate) fn listener(name: &str, index: &str) -> Principal {
        Principal {
            name: name.to_owned(),
            patterns: Some(vec![index.to_owned()]),
        }
    }

    /// Whether this principal may use index `name`.
    pub fn allows(&self, name: &str) -> bool {
        match &self.patterns {
            None => true,
            Some(p) => p.iter().any(|pat| glob_match(pat, name)),
        }
    }

    /// Whether this principal may use every index (no security, or a `*` pattern).
    pub fn unrestricted(&self) -> bool {
        self.patterns
            .as_ref()
            .is_none_or(|p| p.iter().any(|pat| pat == "*"))
    }

    /// Whether every index name that index pattern `pattern` can match is allowed: one
    /// of the principal's patterns matches `pattern` read as a name, its `*`s matched
    /// only by the principal's own `*`s (so `alice-*` covers `alice-*` and
    /// `alice-logs-*`, not `*` nor `al*`).
    pub fn covers(&self, pattern: &str) -> bool {
        match &self.patterns {
            None => true,
            Some(p) => p.iter().any(|pat| covers(pat, pattern)),
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

/// The credentials of a request, as each protocol's clients send them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credentials<'a> {
    /// The `Authorization` header value.
    pub authorization: Option<&'a [u8]>,
    /// InfluxDB 1.x query parameters `u` (user) and `p` (password), on `/write` and
    /// `/query`; read only when no `Authorization` header is sent.
    pub influx_user: Option<(&'a str, &'a str)>,
}

/// Paths every client may call without credentials: the InfluxDB liveness probes
/// (`/ping`, `/health`), which InfluxDB answers without authentication and which its
/// clients call before they send credentials.
pub fn is_public(method: &axum::http::Method, path: &str) -> bool {
    use axum::http::Method;
    (*method == Method::GET || *method == Method::HEAD)
        && matches!(path, "/ping" | "/health" | "/-/healthy" | "/-/ready")
}

/// InfluxDB 1.x's `u` and `p` query parameters of `query` (URL-decoded), when both are
/// there.
pub fn influx_query_user(query: Option<&str>) -> Option<(String, String)> {
    let (mut u, mut p) = (None, None);
    for (k, v) in form_urlencoded::parse(query?.as_bytes()) {
        match k.as_ref() {
            "u" => u = Some(v.into_owned()),
            "p" => p = Some(v.into_owned()),
            _ => {}
        }
    }
    Some((u?, p?))
}

/// Authenticates the `Authorization` header value against `config`.
///
/// # Errors
/// `401 security_exception` when security is on and the credentials are missing or
/// wrong.
pub fn authenticate(config: &Config, header: Option<&[u8]>) -> Result<Principal> {
    authenticate_request(
        config,
        Credentials {
            authorization: header,
            influx_user: None,
        },
    )
}

fn unauthorized(why: &str) -> Error {
    Error::status(
        401,
        "security_exception",
        format!("unable to authenticate {why}"),
    )
}

/// Authenticates a request's credentials against `config`'s users and API keys:
///
/// - `Authorization: Basic base64(user:password)` (Elasticsearch, Prometheus
///   `basic_auth`, InfluxDB 1.x clients);
/// - `Authorization: ApiKey base64(id:key)` (Elasticsearch);
/// - `Authorization: Token <token>` (InfluxDB 2.x clients) and `Authorization: Bearer
///   <token>` (Prometheus `authorization`/`bearer_token`, OTLP exporters' headers), where
///   the token is `user:password` (InfluxDB 1.8's form of a v2 token), `id:key` of an API
///   key, or the base64 of `id:key` (Elasticsearch's encoded API key);
/// - with no `Authorization` header, InfluxDB 1.x's `u` and `p` query parameters.
///
/// # Errors
/// `401 security_exception` when security is on and the credentials are missing or
/// wrong.
pub fn authenticate_request(config: &Config, creds: Credentials<'_>) -> Result<Principal> {
    if !config.security_enabled() {
        return Ok(Principal::anonymous());
    }
    let Some(header) = creds.authorization else {
        if let Some((user, password)) = creds.influx_user {
            return user_principal(config, user, password)
                .ok_or_else(|| unauthorized(&format!("user [{user}] for REST request")));
        }
        return Err(unauthorized(
            "the request: missing authentication credentials for REST request",
        ));
    };
    let text = std::str::from_utf8(header).map_err(|_| unauthorized("the request"))?;
    let (scheme, rest) = text.split_once(' ').unwrap_or((text, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer") {
        return token_principal(config, rest)
            .ok_or_else(|| unauthorized("the request: the token matches no user or API key"));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| unauthorized("the request: credentials are not base64"))?;
    let (id, secret) = decoded
        .split_once(':')
        .ok_or_else(|| unauthorized("the request: expected id:secret"))?;
    if scheme.eq_ignore_ascii_case("basic") {
        user_principal(config, id, secret)
            .ok_or_else(|| unauthorized(&format!("user [{id}] for REST request")))
    } else if scheme.eq_ignore_ascii_case("apikey") {
        key_principal(config, id, secret).ok_or_else(|| unauthorized(&format!("API key [{id}]")))
    } else {
        Err(unauthorized(
            "the request: expected Basic, ApiKey, Token or Bearer credentials",
        ))
    }
}

fn user_principal(config: &Config, name: &str, password: &str) -> Option<Principal> {
    config
        .users
        .iter()
        .find(|u| u.name == name && constant_time_eq(u.password.as_bytes(), password.as_bytes()))
        .map(|u| Principal {
            name: u.name.clone(),
            patterns: Some(u.indices.clone()),
        })
}

fn key_principal(config: &Config, id: &str, key: &str) -> Option<Principal> {
    config
        .api_keys
        .iter()
        .find(|k| k.id == id && constant_time_eq(k.key.as_bytes(), key.as_bytes()))
        .map(|k| Principal {
            name: k.id.clone(),
            patterns: Some(k.indices.clone()),
        })
}

/// A bearer token: `user:password`, `id:key`, or base64 of `id:key`.
fn token_principal(config: &Config, token: &str) -> Option<Principal> {
    let pair = |t: &str| -> Option<Principal> {
        let (a, b) = t.split_once(':')?;
        user_principal(config, a, b).or_else(|| key_principal(config, a, b))
    };
    pair(token).or_else(|| {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(token)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())?;
        let (id, key) = decoded.split_once(':')?;
        key_principal(config, id, key)
    })
}

/// Whether every name `inner` matches is matched by `outer` (both `*` patterns): `outer`
/// must match `inner` with `inner`'s `*`s taken as characters only `outer`'s `*` can
/// absorb. Sufficient, and exact for the patterns people write.
fn covers(outer: &str, inner: &str) -> bool {
    // A literal `*` in `outer` is always a wildcard, so `glob_match` already treats
    // `inner`'s `*` as a character only a wildcard matches.
    glob_match(outer, inner)
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
        assert!(alice.covers("a-*") && alice.covers("a-logs-*") && alice.covers("a-1"));
        assert!(!alice.covers("*") && !alice.covers("a*") && !alice.covers("b-*"));
        assert!(!alice.unrestricted() && Principal::anonymous().unrestricted());
        assert!(Principal::anonymous().covers("*"));
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
        // Without security any credentials are ignored: InfluxDB 2.x clients and Telegraf
        // always send a token.
        let open = authenticate(&Config::default(), Some(b"Token whatever")).unwrap();
        assert_eq!(open, Principal::anonymous());
    }

    #[test]
    fn tokens_bearer_and_influx_query_users() {
        let c = secured();
        let ok = |h: &str| authenticate(&c, Some(h.as_bytes())).map(|p| p.name);
        assert_eq!(ok("Token alice:pw").unwrap(), "alice");
        assert_eq!(ok("Bearer alice:pw").unwrap(), "alice");
        assert_eq!(ok("Token k:s3").unwrap(), "k");
        assert_eq!(ok(&format!("Bearer {}", b64("k:s3"))).unwrap(), "k");
        assert_eq!(ok(&format!("token {}", b64("k:s3"))).unwrap(), "k");
        for bad in [
            "Token alice:nope",
            "Token k:x",
            "Bearer ",
            "Token",
            "Bearer !!",
        ] {
            assert_eq!(ok(bad).unwrap_err().status_and_kind().0, 401, "{bad}");
        }
        // A base64 user:password is not a token form (only API keys are encoded).
        assert!(ok(&format!("Token {}", b64("alice:pw"))).is_err());
        let q = |u: &str, p: &str| {
            authenticate_request(
                &c,
                Credentials {
                    authorization: None,
                    influx_user: Some((u, p)),
                },
            )
        };
        assert_eq!(q("alice", "pw").unwrap().name, "alice");
        assert_eq!(q("alice", "bad").unwrap_err().status_and_kind().0, 401);
        assert_eq!(q("k", "s3").unwrap_err().status_and_kind().0, 401);
        assert_eq!(
            influx_query_user(Some("db=x&u=al%20ice&p=p%26w")),
            Some(("al ice".to_owned(), "p&w".to_owned()))
        );
        assert_eq!(influx_query_user(Some("db=x&u=a")), None);
        assert!(is_public(&axum::http::Method::GET, "/ping"));
        assert!(is_public(&axum::http::Method::HEAD, "/ping"));
        assert!(!is_public(&axum::http::Method::POST, "/write"));
    }
}
