//! Plain HTTP requests to a server under test (ureq, blocking), failing on any status
//! other than 2xx with the status and the answer's text.

use std::time::Duration;

use anyhow::{Result, bail};

/// A ureq agent whose requests time out after `secs`.
pub(crate) fn agent(secs: u64) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(secs))
        .build()
}

/// GET `url` (120 s timeout), the answer as text.
pub(crate) fn get_text(url: &str) -> Result<String> {
    match agent(120).get(url).call() {
        Ok(r) => Ok(r.into_string()?),
        Err(ureq::Error::Status(code, r)) => {
            bail!("GET {url}: {code} {}", r.into_string().unwrap_or_default())
        }
        Err(e) => Err(e.into()),
    }
}

/// POST `body` as `content_type` to `url` (600 s timeout), the answer as text.
pub(crate) fn post_text(url: &str, body: &str, content_type: &str) -> Result<String> {
    match agent(600)
        .post(url)
        .set("content-type", content_type)
        .send_string(body)
    {
        Ok(r) => Ok(r.into_string()?),
        Err(ureq::Error::Status(code, r)) => {
            bail!("POST {url}: {code} {}", r.into_string().unwrap_or_default())
        }
        Err(e) => Err(e.into()),
    }
}
