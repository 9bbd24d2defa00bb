//! Debian's nginx as the plain reverse proxy the gateway is measured against.

use std::path::PathBuf;
use std::process::Command;

use super::spawned::{Spawned, Stop, free_port};

/// Where nginx is, or how to get it.
fn binary() -> anyhow::Result<PathBuf> {
    for candidate in [
        "/usr/sbin/nginx",
        "/usr/local/sbin/nginx",
        "/usr/local/nginx/sbin/nginx",
    ] {
        if std::path::Path::new(candidate).exists() {
            return Ok(candidate.into());
        }
    }
    anyhow::bail!(
        "nginx is not installed; the gateway bench measures against it. On Debian or Ubuntu: \
         sudo apt-get install nginx-light (or nginx)"
    )
}

/// An nginx of its own: a configuration, logs and pid file in a temporary directory, on a free
/// loopback port, proxying to the upstream over keep-alive connections. Stopped with SIGTERM to
/// the master, which stops its workers.
pub(super) async fn start(upstream: &str) -> anyhow::Result<Spawned> {
    let nginx = binary()?;
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let upstream = upstream.trim_start_matches("http://");
    let root = dir.path().display();
    // As a production reverse proxy is set up: a worker per core, keep-alive to the
    // upstream, no access log (the gateway writes none either at its default level).
    let config = format!(
        "worker_processes auto;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    upstream backend {{ server {upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
    }}
}}
"
    );
    let path = dir.path().join("nginx.conf");
    std::fs::write(&path, config)?;
    let mut command = Command::new(&nginx);
    command
        .arg("-c")
        .arg(&path)
        .args(["-p", &root.to_string(), "-g", "daemon off;"]);
    Spawned::start(command, "nginx (see its error.log)", port, dir, Stop::Term).await
}
