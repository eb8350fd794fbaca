//! The web UI: `/` answers the page to browsers and the JSON handshake to every other
//! client; the page's assets under `/_ui/` with their content types and validators; a
//! browser refused for credentials gets a `Basic` challenge it can prompt for.

use base64::Engine as _;

use crate::support::{TestServer, send_headers};

const BROWSER_ACCEPT: &str =
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn browsers_get_the_page_and_clients_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let (status, headers, page) =
        send_headers("GET", &s.url("/"), None, &[("accept", BROWSER_ACCEPT)]);
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(header(&headers, "vary"), Some("Accept"));
    assert!(
        header(&headers, "content-security-policy")
            .is_some_and(|v| v.contains("script-src 'self'")),
        "{headers:?}"
    );
    assert!(page.starts_with("<!doctype html>"), "{page}");
    assert!(page.contains(r#"<script src="/_ui/app.js""#), "{page}");
    let (status, headers, body) =
        send_headers("HEAD", &s.url("/"), None, &[("accept", "text/html")]);
    assert_eq!((status, body.as_str()), (200, ""));
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/html; charset=utf-8")
    );

    // Every other client gets the handshake, byte for byte the same whatever it accepts.
    let (status, headers, plain) = send_headers("GET", &s.url("/"), None, &[]);
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert_eq!(header(&headers, "x-elastic-product"), Some("Elasticsearch"));
    let info: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert_eq!(info["tagline"], "You Know, for Search");
    assert_eq!(info["version"]["number"], "9.1.0");
    for accept in ["*/*", "application/json"] {
        let (status, headers, text) = send_headers("GET", &s.url("/"), None, &[("accept", accept)]);
        assert_eq!((status, text.as_str()), (200, plain.as_str()), "{accept}");
        assert_eq!(
            header(&headers, "content-type"),
            Some("application/json"),
            "{accept}"
        );
    }
    // The official clients' vendor type keeps its negotiated content type.
    let (status, headers, text) = send_headers(
        "GET",
        &s.url("/"),
        None,
        &[(
            "accept",
            "application/vnd.elasticsearch+json; compatible-with=9",
        )],
    );
    assert_eq!((status, text.as_str()), (200, plain.as_str()));
    assert_eq!(
        header(&headers, "content-type"),
        Some("application/vnd.elasticsearch+json;compatible-with=9")
    );
}

#[test]
fn assets_are_served_with_their_types_and_revalidated() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    for (name, content_type, needle) in [
        ("app.js", "text/javascript; charset=utf-8", "query_range"),
        ("app.css", "text/css; charset=utf-8", "#chart"),
        ("favicon.svg", "image/svg+xml", "<svg"),
    ] {
        let url = s.url(&format!("/_ui/{name}"));
        let (status, headers, text) = send_headers("GET", &url, None, &[]);
        assert_eq!(status, 200, "{name}: {text}");
        assert_eq!(
            header(&headers, "content-type"),
            Some(content_type),
            "{name}"
        );
        assert_eq!(
            header(&headers, "x-content-type-options"),
            Some("nosniff"),
            "{name}"
        );
        assert_eq!(
            header(&headers, "cache-control"),
            Some("private, no-cache"),
            "{name}"
        );
        assert!(text.contains(needle), "{name}");
        // An unchanged asset revalidates to a 304 without a body.
        let etag = header(&headers, "etag").unwrap().to_owned();
        let (status, _, text) = send_headers("GET", &url, None, &[("if-none-match", &etag)]);
        assert_eq!((status, text.as_str()), (304, ""), "{name}");
        let (status, _, _) = send_headers("GET", &url, None, &[("if-none-match", "\"other\"")]);
        assert_eq!(status, 200, "{name}");
    }
    // The page's script builds the DOM with text only.
    let (_, _, js) = send_headers("GET", &s.url("/_ui/app.js"), None, &[]);
    assert!(!js.contains("innerHTML") && !js.contains("insertAdjacentHTML"));
    for path in [
        "/_ui/nosuch.js",
        "/_ui/index.html",
        "/_ui/..%2Fapp.js",
        "/_ui/app.js.map",
    ] {
        let (status, headers, text) = send_headers("GET", &s.url(path), None, &[]);
        assert_eq!(status, 404, "{path}: {text}");
        assert_eq!(
            header(&headers, "content-type"),
            Some("application/json"),
            "{path}"
        );
    }
}

#[test]
fn browsers_are_challenged_for_basic_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"ui\"\npassword = \"pw ui\"\nindices = [\"*\"]\n",
    )
    .unwrap();
    let s = TestServer::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("ui:pw ui")
    );
    // A browser without credentials: 401 with one Basic challenge, which it prompts for.
    let (status, headers, _) =
        send_headers("GET", &s.url("/"), None, &[("accept", BROWSER_ACCEPT)]);
    assert_eq!(status, 401);
    let challenges: Vec<&str> = headers
        .iter()
        .filter(|(k, _)| k == "www-authenticate")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(challenges, [r#"Basic realm="tidemark", charset="UTF-8""#]);
    // Other clients keep the challenge they had.
    let (status, headers, _) = send_headers("GET", &s.url("/"), None, &[]);
    assert_eq!(status, 401);
    assert!(
        header(&headers, "www-authenticate").is_some_and(|v| v.contains("ApiKey")),
        "{headers:?}"
    );
    // Assets need credentials as everything else does; what the page loads and calls is
    // challenged in the same realm, so that the browser replays the credentials it has.
    for (path, headers) in [
        ("/_ui/app.js", &[("sec-fetch-mode", "no-cors")][..]),
        (
            "/_stats",
            &[("sec-fetch-mode", "cors"), ("accept", "application/json")][..],
        ),
        (
            "/api/v1/query_range?query=up&start=0&end=60&step=15",
            &[("sec-fetch-mode", "cors")][..],
        ),
        ("/write?db=x", &[("sec-fetch-mode", "cors")][..]),
    ] {
        let (status, answered, _) = send_headers("GET", &s.url(path), None, headers);
        assert_eq!(status, 401, "{path}");
        assert_eq!(
            header(&answered, "www-authenticate"),
            Some(r#"Basic realm="tidemark", charset="UTF-8""#),
            "{path}"
        );
    }
    // With the credentials the browser sends after the prompt: the page and its assets.
    let (status, headers, page) = send_headers(
        "GET",
        &s.url("/"),
        None,
        &[("accept", BROWSER_ACCEPT), ("authorization", &basic)],
    );
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(page.contains("/_ui/app.css"));
    let (status, _, _) = send_headers(
        "GET",
        &s.url("/_ui/app.js"),
        None,
        &[("authorization", &basic)],
    );
    assert_eq!(status, 200);
}
