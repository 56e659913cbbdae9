//! The docs document every flag `--help` shows, where a reader looks for
//! that command: the devnet's options table (docs/devnet.md), the
//! validator's section (docs/validator.md), and the commands table's row
//! for every other command (docs/commands.md); README.md has a line for
//! every command.

use lite_node_testkit::workspace_root;

use crate::support::Node;

/// The long flags of `lite-node <command> --help`, but `--help` and the
/// global `--env-file` (documented once, under the commands table).
fn flags(node: &Node, command: &[&str]) -> Vec<String> {
    let run = node.run(&[command, &["--help"]].concat());
    run.assert_ok();
    let flags: Vec<String> = run
        .stdout
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = if l.starts_with('-') && !l.starts_with("--") { l.split_once(", ")?.1 } else { l };
            let flag: String =
                l.strip_prefix("--")?.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            Some(format!("--{flag}"))
        })
        .collect();
    assert!(flags.iter().any(|f| f == "--help"), "no flags read from `{}` --help:\n{}", command.join(" "), run.stdout);
    flags.into_iter().filter(|f| f != "--help" && f != "--env-file").collect()
}

/// Whether `text` names `flag` as a whole word (`--pools` is not `--pools-file`).
fn names(text: &str, flag: &str) -> bool {
    text.match_indices(flag)
        .any(|(at, _)| !text[at + flag.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-'))
}

#[test]
fn every_flag_of_every_command_is_in_the_docs_where_that_command_is_documented() {
    let read = |rel: &str| std::fs::read_to_string(workspace_root().join(rel)).unwrap();
    let (devnet, validator, commands) = (read("docs/devnet.md"), read("docs/validator.md"), read("docs/commands.md"));
    let table = |doc: &str, header: &str| -> String {
        let rows = doc.split(header).nth(1).unwrap_or_else(|| panic!("no table `{header}` in docs/devnet.md"));
        rows.lines().skip(2).take_while(|l| l.starts_with('|')).map(|l| l.split('|').nth(1).unwrap_or("")).collect()
    };
    let section = |doc: &str, heading: &str| -> String {
        let rest = doc.split(heading).nth(1).unwrap_or_else(|| panic!("no `{heading}` in docs/validator.md"));
        rest.split("\n#").next().unwrap().to_owned()
    };
    let row = |command: &str| -> String {
        let start = format!("| `lite-node {command}");
        commands
            .lines()
            .find(|l| l.starts_with(&start) && l[start.len()..].starts_with([' ', '`']))
            .unwrap_or_else(|| panic!("no row for `lite-node {command}` in docs/commands.md's commands table"))
            .to_owned()
    };
    let node = Node::new();
    let mut missing = Vec::new();
    let commands: [(&[&str], String); 34] = [
        (&["devnet"], table(&devnet, "| option | meaning (default) |")),
        (&["validator"], section(&validator, "## Running a validator")),
        (&["run"], row("run")),
        (&["check"], row("check")),
        (&["collector"], row("collector")),
        (&["peer-id"], row("peer-id")),
        (&["finalized"], row("finalized")),
        (&["read"], row("read")),
        (&["serve"], row("serve")),
        (&["archive", "restore"], row("archive restore")),
        (&["assignments"], row("assignments")),
        (&["alert", "test"], row("alert test")),
        (&["compute", "fetch"], row("compute fetch")),
        (&["compute", "list"], row("compute list")),
        (&["compute", "run"], row("compute run")),
        (&["compute", "new"], row("compute new")),
        (&["market", "deploy"], row("market deploy")),
        (&["market", "status"], row("market status")),
        (&["market", "env"], row("market env")),
        (&["market", "peers"], row("market peers")),
        (&["market", "release"], row("market release")),
        (&["market", "slots", "register"], row("market slots register")),
        (&["market", "slots", "reassign"], row("market slots reassign")),
        (&["market", "slots", "remove"], row("market slots remove")),
        (&["market", "slots", "full-node"], row("market slots full-node")),
        (&["market", "slots", "list"], row("market slots list")),
        (&["market", "validators", "add"], row("market validators add")),
        (&["market", "validators", "remove"], row("market validators remove")),
        (&["market", "validators", "list"], row("market validators list")),
        (&["market", "days"], row("market days")),
        (&["market", "roles", "grant"], row("market roles grant")),
        (&["market", "roles", "revoke"], row("market roles revoke")),
        (&["market", "roles", "show"], row("market roles show")),
        (&["market", "roles", "transfer-ownership"], row("market roles transfer-ownership")),
    ];
    for (command, documented) in &commands {
        for flag in flags(&node, command) {
            if !names(documented, &flag) {
                missing.push(format!("lite-node {} {flag}", command.join(" ")));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "--help shows flags the docs do not document where they document the command:\n{missing:#?}"
    );
    // Every command `--help` lists is one of those above (or the help itself).
    let top = node.run(&["--help"]);
    let listed: Vec<&str> = top
        .stdout
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let verbs: std::collections::BTreeSet<&str> = commands.iter().map(|(c, _)| c[0]).collect();
    assert!(listed.len() > verbs.len() / 2, "no commands read from `lite-node --help`:\n{}", top.stdout);
    let readme = read("README.md");
    for command in listed {
        let known = command == "help" || commands.iter().any(|(c, _)| c[0] == command);
        assert!(known, "`lite-node {command}` is not checked against the docs: add it here");
        if command != "help" {
            assert!(
                readme.contains(&format!("`lite-node {command}")),
                "README.md has no line for `lite-node {command}`"
            );
        }
    }
    assert!(names("--pools-file x", "--pools-file") && !names("--pools-file", "--pools"), "the word check can fail");
}

/// Every repository path the docs name in backticks exists: a file moved or
/// renamed is caught in the docs that point to it. Brace lists
/// (`{a,b}.rs`) name each; placeholders (`<…>`, `*`) and what a build or a
/// run makes (the devnet's worlds and run, `node_modules`) are not checked.
#[test]
fn every_path_the_docs_name_exists() {
    fn expand(path: &str) -> Vec<String> {
        match (path.find('{'), path.find('}')) {
            (Some(open), Some(close)) if open < close => path[open + 1..close]
                .split(',')
                .flat_map(|alt| expand(&format!("{}{alt}{}", &path[..open], &path[close + 1..])))
                .collect(),
            _ => vec![path.to_owned()],
        }
    }
    const TOP: [&str; 12] = [
        "runtime/",
        "protocol/",
        "validator/",
        "computes/",
        "contracts/",
        "devnet/",
        "docs/",
        "tests/",
        "plugin-api/",
        "proto/",
        ".config/",
        ".ci/",
    ];
    const MADE: [&str; 3] = ["devnet/world", "devnet/node_modules", "devnet/run"];
    let root = workspace_root();
    let mut docs = vec!["README.md".to_owned(), "ARCHITECTURE.md".to_owned(), "contracts/README.md".to_owned()];
    for entry in std::fs::read_dir(root.join("docs")).unwrap().map(Result::unwrap) {
        docs.push(format!("docs/{}", entry.file_name().to_string_lossy()));
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        for quoted in text.split('`').skip(1).step_by(2) {
            if quoted.contains(char::is_whitespace) || !TOP.iter().any(|t| quoted.starts_with(t)) {
                continue;
            }
            if quoted.contains(['<', '>', '*', '$', '…']) {
                continue;
            }
            let path = quoted.split(':').next().unwrap().trim_end_matches(['.', ',', ';']);
            for path in expand(path) {
                if MADE.iter().any(|m| path.starts_with(m)) {
                    continue;
                }
                checked += 1;
                if !root.join(&path).exists() {
                    missing.push(format!("{doc}: `{path}`"));
                }
            }
        }
    }
    assert!(checked > 100, "paths checked: {checked}");
    assert!(missing.is_empty(), "the docs name paths that do not exist:\n{missing:#?}");
    assert_eq!(expand("a/{b,c}.rs"), ["a/b.rs", "a/c.rs"], "brace lists expand");
}
