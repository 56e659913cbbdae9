//! Child processes of the devnet (anvil and the nodes): each in its own
//! process group (so a terminal's Ctrl-C reaches only the devnet, which then
//! stops them in order), stopped with SIGTERM then SIGKILL, also on drop.

use std::{
    fs::File,
    io::{BufRead, BufReader},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use rustix::process::{Pid, Signal, kill_process};

/// Refuses another restart of `who` (a node, a validator) once it has been
/// restarted `max` times, naming how it ended and its log's last lines.
pub fn refuse_after(who: &str, restarts: u32, max: u32, status: &str, process: &Guarded) -> anyhow::Result<()> {
    if restarts >= max {
        anyhow::bail!(
            "{who} exited ({status}) after {restarts} restarts; last lines of {}:\n{}",
            process.log.display(),
            process.log_tail(15)
        );
    }
    Ok(())
}

/// A child process that is stopped when dropped.
pub struct Guarded {
    pub name: String,
    child: Child,
    pub log: PathBuf,
    exited: Option<ExitStatus>,
}

impl Guarded {
    /// Spawns `cmd` (stdin closed; stderr, and stdout unless piped, to `log`).
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path, pipe_stdout: bool) -> Result<Self> {
        // Appended: a node restarted by the devnet keeps one log.
        let file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let stdout = if pipe_stdout { Stdio::piped() } else { Stdio::from(file.try_clone()?) };
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name} ({})", cmd.get_program().to_string_lossy()))?;
        Ok(Self { name: name.to_owned(), child, log: log.to_owned(), exited: None })
    }

    /// The exit status, once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    fn signal(&mut self, signal: Signal) {
        if self.exited().is_none()
            && let Some(pid) = Pid::from_raw(self.child.id() as i32)
        {
            let _ = kill_process(pid, signal);
        }
    }

    /// SIGSTOP now, SIGCONT after `pause` (in the background): a process
    /// that stops answering for a while, for drills.
    pub fn stall(&mut self, pause: Duration) {
        if self.exited().is_some() {
            return;
        }
        let Some(pid) = Pid::from_raw(self.child.id() as i32) else { return };
        let _ = kill_process(pid, Signal::STOP);
        std::thread::spawn(move || {
            std::thread::sleep(pause);
            let _ = kill_process(pid, Signal::CONT);
        });
    }

    /// Whether its log says `needle` yet (it has started); an error naming
    /// `who`, with the log's last lines, once it has exited.
    pub fn started(&mut self, who: &str, needle: &str) -> Result<bool> {
        if let Some(status) = self.exited() {
            anyhow::bail!(
                "{who} exited at start ({status}); last lines of {}:\n{}",
                self.log.display(),
                self.log_tail(15)
            );
        }
        Ok(std::fs::read_to_string(&self.log).is_ok_and(|l| l.contains(needle)))
    }

    /// Its process id, while it runs.
    pub fn pid(&mut self) -> Option<Pid> {
        if self.exited().is_some() {
            return None;
        }
        Pid::from_raw(self.child.id() as i32)
    }

    /// SIGKILL: a crash, for drills.
    pub fn kill(&mut self) {
        self.signal(Signal::KILL);
        let _ = self.child.wait();
    }

    /// Peak resident memory so far (`VmHWM`), in KiB; `None` once exited.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// CPU time used so far (user and system, every thread), in seconds;
    /// `None` once exited.
    pub fn cpu_secs(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command's closing parenthesis: state is field 3,
        // utime and stime fields 14 and 15.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }
}

/// Sends SIGTERM to every process, waits up to `grace` for all of them,
/// then SIGKILLs what is left.
pub fn stop_all(children: &mut [&mut Guarded], grace: Duration) {
    for c in children.iter_mut() {
        c.signal(Signal::TERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && children.iter_mut().any(|c| c.exited().is_none()) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for c in children.iter_mut() {
        if c.exited().is_none() {
            tracing::warn!("{} did not stop within {grace:?}; killing it", c.name);
            let _ = c.child.kill();
            c.exited = c.child.wait().ok();
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        stop_all(&mut [self], Duration::from_secs(10));
    }
}

/// A running anvil with its own HOME (anvil spills state below
/// `$HOME/.foundry` and removes it only on a clean exit); stopped on drop,
/// and its HOME removed with it.
pub struct AnvilProcess {
    pub process: Guarded,
    pub port: u16,
    home: PathBuf,
}

impl AnvilProcess {
    /// Starts `bin` as the `name` chain (`source`, `anchor`: its log is
    /// `<name>-anvil.log`) on 127.0.0.1 and a port the OS picks, loading
    /// `state` when given, with `chain_id` when given. History is pruned to
    /// the most recent `keep_states` blocks, held in memory: nothing is
    /// written to disk however long the devnet runs.
    pub fn start(
        bin: &Path,
        name: &str,
        state: Option<&Path>,
        chain_id: Option<u64>,
        run_dir: &Path,
        keep_states: u64,
    ) -> Result<Self> {
        let home = run_dir.join("anvil-home").join(name);
        std::fs::create_dir_all(&home)?;
        let mut cmd = Command::new(bin);
        cmd.env("HOME", &home)
            .args(["--host", "127.0.0.1", "--port", "0", "--prune-history"])
            .arg(keep_states.to_string());
        if let Some(state) = state {
            cmd.arg("--load-state").arg(state);
        }
        if let Some(id) = chain_id {
            cmd.arg("--chain-id").arg(id.to_string());
        }
        let mut process = Guarded::spawn("anvil", &mut cmd, &run_dir.join(format!("{name}-anvil.log")), true)?;
        let stdout = process.take_stdout().expect("stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the port, then keeps draining so anvil never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("Listening on 127.0.0.1:") {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(port)) => Ok(Self { process, port, home }),
            _ => {
                let tail = process.log_tail(20);
                bail!("anvil ({}, the {name} chain) did not start listening: {tail}", bin.display())
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops anvil and removes its HOME.
    pub fn stop(mut self) {
        stop_all(&mut [&mut self.process], Duration::from_secs(10));
    }
}

impl Drop for AnvilProcess {
    fn drop(&mut self) {
        stop_all(&mut [&mut self.process], Duration::from_secs(10));
        let _ = std::fs::remove_dir_all(&self.home);
        // The homes' parent goes with the last of them.
        if let Some(parent) = self.home.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}
