//! Starts `tidemark-bloomd` in this process on a free port, talks RESP to it over a plain
//! TCP socket, and shuts it down: `cargo run -p tidemark-bloomd --example embedded_server`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn command(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>, args: &[&str]) -> String {
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    if stream.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut line = String::new();
    let _ = reader.read_line(&mut line);
    line.trim_end().to_string()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("tidemark-bloomd-example-{}", std::process::id()));
    let config = tidemark_bloomd::Config {
        port: 0,
        dir: dir.clone(),
        save: Vec::new(),
        port_file: Some(dir.join("port")),
        ..tidemark_bloomd::Config::default()
    };
    let server = std::thread::spawn(move || tidemark_bloomd::run(config));

    let deadline = Instant::now() + Duration::from_secs(10);
    let port: u16 = loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("port")) {
            if let Ok(port) = text.trim().parse() {
                break port;
            }
        }
        if Instant::now() > deadline {
            return Err("the server did not start".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };

    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    for args in [
        &["BF.RESERVE", "seen", "0.01", "1000"][..],
        &["BF.ADD", "seen", "event-42"],
        &["BF.EXISTS", "seen", "event-42"],
        &["BF.EXISTS", "seen", "event-43"],
        &["BF.CARD", "seen"],
    ] {
        println!(
            "{} -> {}",
            args.join(" "),
            command(&mut stream, &mut reader, args)
        );
    }
    command(&mut stream, &mut reader, &["SHUTDOWN", "NOSAVE"]);
    server.join().map_err(|_| "server thread panicked")??;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
