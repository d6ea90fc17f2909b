//! The documentation against the code: every pullgate command line shown in a fenced `sh` block
//! of README.md or docs/ parses with pullgate's own command-line parser (and every one named in
//! prose names subcommands, flags and values that exist, as does every `[section] key`), every pullgate
//! configuration shown (and config.toml.example) loads with its own config parser, every
//! containerd configuration and shipped fragment is valid TOML, every repository path a command
//! names exists, every relative link resolves; README.md stays short; `--version` matches
//! Cargo.toml and CHANGELOG.md, which names every table of the database; no development history
//! in the project's text.
use clap::{CommandFactory, Parser};
use pulldown_cmark::{CodeBlockKind, Event, Parser as Markdown, Tag, TagEnd};
use pullgate::cli::Cli;
use pullgate::Config;
use std::path::{Path, PathBuf};

/// The first line of a `toml` block that shows pullgate's configuration.
const PULLGATE_CONFIG: &str = "# /etc/pullgate/config.toml";
/// The first line of a `toml` block that shows containerd's configuration.
const CONTAINERD_CONFIG: &str = "# /etc/containerd/config.toml";
const README_MAX_LINES: usize = 300;
/// The tables of pullgate's configuration.
const PULLGATE_TABLES: [&str; 6] = ["daemon", "policy", "namespaces", "registry", "cri", "metrics"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, in a stable order.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

struct Block {
    file: PathBuf,
    line: usize,
    info: String,
    text: String,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

fn fenced_blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).expect("readable document");
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (event, range) in Markdown::new(&text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                open = Some(Block { file: file.to_path_buf(), line: line_of(&text, range.start), info: info.to_string(), text: String::new() })
            }
            Event::Text(t) => {
                if let Some(b) = open.as_mut() {
                    b.text.push_str(&t)
                }
            }
            Event::End(TagEnd::CodeBlock) => out.extend(open.take()),
            _ => {}
        }
    }
    out
}

/// The spans of a document that `pick` takes from its Markdown events (inline code, link
/// targets), with their lines.
fn spans(file: &Path, pick: impl Fn(Event) -> Option<String>) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(file).expect("readable document");
    Markdown::new(&text).into_offset_iter().filter_map(|(event, range)| Some((line_of(&text, range.start), pick(event)?))).collect()
}

/// The inline code spans of a document, with their lines.
fn inline_code(file: &Path) -> Vec<(usize, String)> {
    spans(file, |e| match e {
        Event::Code(code) => Some(code.to_string()),
        _ => None,
    })
}

/// The link targets of a document, with their lines.
fn links(file: &Path) -> Vec<(usize, String)> {
    spans(file, |e| match e {
        Event::Start(Tag::Link { dest_url, .. }) => Some(dest_url.to_string()),
        _ => None,
    })
}

/// The fenced blocks of every document whose info string starts with `kind` (`sh`, `toml`).
fn blocks_of(kind: &str) -> Vec<Block> {
    documents().iter().flat_map(|f| fenced_blocks(f)).filter(|b| b.info.split_whitespace().next() == Some(kind)).collect()
}

/// The commands of an `sh` block: continuation lines joined, comments and prompts dropped.
fn commands(block: &Block) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut start = 0;
    for (i, raw) in block.text.lines().enumerate() {
        let line = raw.trim();
        if pending.is_empty() {
            start = block.line + 1 + i;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let cmd = pending.trim().trim_start_matches("$ ").trim_start_matches("# ").to_string();
        pending.clear();
        if !cmd.is_empty() && !raw.trim_start().starts_with('#') {
            out.push((start, cmd));
        }
    }
    out
}

/// The words of each pullgate command in the command line `cmd` (each command of a pipeline or
/// list, after `sudo`, `env` and VAR=value prefixes).
fn pullgate_words(cmd: &str) -> Vec<Vec<String>> {
    cmd.split(['|', ';', '&'])
        .filter_map(|part| {
            let words = shlex::split(part)?;
            let mut rest = words.as_slice();
            while let Some((w, tail)) = rest.split_first() {
                if w == "sudo" || w == "env" || (w.contains('=') && !w.starts_with('-')) {
                    rest = tail;
                } else {
                    break;
                }
            }
            let (program, _) = rest.split_first()?;
            let name = Path::new(program).file_name()?.to_str()?;
            matches!(name, "pullgate" | "pullgated").then(|| rest.to_vec())
        })
        .collect()
}

#[test]
fn every_pullgate_command_shown_parses() {
    let mut checked = 0;
    let mut errors = Vec::new();
    for block in blocks_of("sh") {
        for (line, cmd) in commands(&block) {
            for words in pullgate_words(&cmd) {
                checked += 1;
                match Cli::try_parse_from(&words) {
                    Ok(_) => {}
                    // `--help` and `--version` are what they show.
                    Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) => {}
                    Err(e) => errors.push(format!("{}:{line}: {cmd}\n{e}", block.file.display())),
                }
            }
        }
    }
    assert!(errors.is_empty(), "commands the parser refuses:\n{}", errors.join("\n"));
    assert!(checked >= 20, "only {checked} pullgate commands found in the docs' sh blocks");
}

#[test]
fn every_pullgate_command_named_in_prose_exists() {
    // An inline `pullgate SUB --flag ...` may leave out required arguments, never name a
    // subcommand, flag or value that does not exist.
    use clap::error::ErrorKind;
    let mut checked = 0;
    let mut errors = Vec::new();
    for file in documents() {
        for (line, code) in inline_code(&file) {
            for mut words in pullgate_words(&code) {
                // Only `pullgate SUBCOMMAND ...` or `pullgate --flag ...` (prose also quotes
                // messages that begin with the word pullgate); an ellipsis elides the rest.
                let known = Cli::command().get_subcommands().any(|c| words.get(1).is_some_and(|w| w == c.get_name()));
                if !known && !words.get(1).is_some_and(|w| w.starts_with('-')) {
                    continue;
                }
                words.retain(|w| w != "..." && w != "…");
                checked += 1;
                if let Err(e) = Cli::try_parse_from(&words) {
                    if matches!(e.kind(), ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand | ErrorKind::InvalidValue | ErrorKind::ArgumentConflict | ErrorKind::TooManyValues) {
                        errors.push(format!("{}:{line}: `{code}`\n{e}", file.display()));
                    }
                }
            }
        }
    }
    assert!(errors.is_empty(), "commands named in prose that the parser refuses:\n{}", errors.join("\n"));
    assert!(checked >= 20, "only {checked} pullgate commands named in prose");
}

#[test]
fn every_configuration_key_named_in_prose_exists() {
    // `[section] key` in prose: the key must be one pullgate's parser knows (an unknown one is
    // refused as such; a known one given a value of the wrong type fails otherwise).
    let re = regex::Regex::new(r"^\[(daemon|policy|registry|cri|metrics)\] ([a-z_]+)").expect("regex");
    let mut checked = 0;
    let mut unknown = Vec::new();
    for file in documents().into_iter().chain([root().join("config.toml.example")]) {
        let spans = if file.extension().is_some_and(|e| e == "md") { inline_code(&file) } else { Vec::new() };
        for (line, code) in spans {
            let Some(c) = re.captures(&code) else { continue };
            checked += 1;
            let probe = format!("[{}]\n{} = {{ probe = 1 }}\n", &c[1], &c[2]);
            if let Err(e) = Config::parse(&probe) {
                if e.to_string().contains("unknown field") {
                    unknown.push(format!("{}:{line}: `{code}`", file.display()));
                }
            }
        }
    }
    assert!(unknown.is_empty(), "configuration keys that do not exist:\n{}", unknown.join("\n"));
    assert!(checked >= 10, "only {checked} configuration keys named in prose");
}

#[test]
fn every_repository_path_a_command_names_exists() {
    let prefixes = ["plugin/", "scripts/", "tests/", "bench/", "docs/", "config.toml.example"];
    let ignored: Vec<String> = std::fs::read_to_string(root().join(".gitignore"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix('/'))
        .map(str::to_string)
        .collect();
    let mut checked = 0;
    let mut missing = Vec::new();
    for block in blocks_of("sh") {
        for (line, cmd) in commands(&block) {
            for word in shlex::split(&cmd).unwrap_or_default() {
                let word = word.trim_start_matches("./");
                if !prefixes.iter().any(|p| word.starts_with(p)) || word.contains(['$', '*', '<']) {
                    continue;
                }
                checked += 1;
                // A build output (.gitignore names it) exists once built: its directory must.
                let built = ignored.iter().any(|i| word == i || word.starts_with(&format!("{i}/")));
                let must_exist = if built { Path::new(word).parent().unwrap_or(Path::new("")) } else { Path::new(word) };
                if !root().join(must_exist).exists() {
                    missing.push(format!("{}:{line}: {word}", block.file.display()));
                }
            }
        }
    }
    assert!(missing.is_empty(), "paths that do not exist:\n{}", missing.join("\n"));
    assert!(checked >= 3, "only {checked} repository paths found in the docs' commands");
}

#[test]
fn every_configuration_shown_loads() {
    let mut pullgate = 0;
    let mut errors = Vec::new();
    for block in blocks_of("toml") {
        let first = block.text.lines().next().unwrap_or("").trim();
        let at = format!("{}:{}", block.file.display(), block.line);
        if first == PULLGATE_CONFIG {
            pullgate += 1;
            if let Err(e) = Config::parse(&block.text) {
                errors.push(format!("{at}: pullgate's parser: {e}"));
            }
        } else {
            match block.text.parse::<toml::Table>() {
                Err(e) => errors.push(format!("{at}: not TOML: {e}")),
                // pullgate's own tables outside a block marked as pullgate's would go unchecked.
                Ok(t) if first != CONTAINERD_CONFIG && PULLGATE_TABLES.iter().any(|k| t.contains_key(*k)) => {
                    errors.push(format!("{at}: pullgate's configuration, but the block does not start with {PULLGATE_CONFIG:?}"))
                }
                Ok(_) => {}
            }
        }
    }
    let example = std::fs::read_to_string(root().join("config.toml.example")).expect("config.toml.example");
    if let Err(e) = Config::parse(&example) {
        errors.push(format!("config.toml.example: {e}"));
    }
    for fragment in ["plugin/containerd-1.x.toml", "plugin/containerd-2.x.toml"] {
        let text = std::fs::read_to_string(root().join(fragment)).expect("fragment");
        if let Err(e) = text.parse::<toml::Table>() {
            errors.push(format!("{fragment}: not TOML: {e}"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(pullgate >= 2, "only {pullgate} pullgate configurations found in the docs");
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for file in documents() {
        for (line, url) in links(&file) {
            if url.contains("://") || url.starts_with('#') || url.starts_with("mailto:") {
                continue;
            }
            let path = url.split('#').next().unwrap_or("");
            let dir = file.parent().expect("a document's directory");
            if !dir.join(path).exists() {
                broken.push(format!("{}:{line}: {url}", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

#[test]
fn readme_is_short_and_links_the_docs() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(lines <= README_MAX_LINES, "README.md has {lines} lines (at most {README_MAX_LINES})");
    let linked: Vec<String> = links(&root().join("README.md")).into_iter().map(|(_, u)| u).collect();
    for doc in documents().iter().skip(1) {
        let name = format!("docs/{}", doc.file_name().and_then(|n| n.to_str()).expect("name"));
        assert!(linked.iter().any(|u| u.split('#').next() == Some(name.as_str())), "README.md does not link {name}");
    }
}

#[test]
fn version_matches_cargo_and_changelog() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pullgate")).arg("--version").output().expect("pullgate --version runs");
    assert!(out.status.success());
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("pullgate {version}"));
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).expect("CHANGELOG.md");
    // The newest release is the first `## [x.y.z]` heading after `## [Unreleased]`.
    let newest = changelog
        .lines()
        .filter_map(|l| l.strip_prefix("## ["))
        .filter_map(|l| l.split(']').next())
        .find(|v| *v != "Unreleased");
    assert_eq!(newest, Some(version), "CHANGELOG.md's newest release is not Cargo.toml's version");
}

/// Files of the project whose text is the product's (docs, code, tests, scripts, benchmarks).
fn project_text_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| ["md", "rs", "sh", "py", "toml", "go", "yaml", "proto", "service", "example"].contains(&x.to_str().unwrap_or(""))) {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md"), root().join("CHANGELOG.md"), root().join("config.toml.example"), root().join("Cargo.toml")];
    for dir in ["docs", "src", "tests", "scripts", "bench", "benches", "examples", "plugin", "fuzz/fuzz_targets", "proto", ".ci"] {
        walk(&root().join(dir), &mut out);
    }
    out
}

#[test]
fn no_development_history_in_the_project() {
    // Built from pieces so that this file does not match itself.
    let patterns = [
        regex::Regex::new(&format!(r"(?i)\b{}\s+[0-9]+", "stop")).expect("regex"),
        regex::Regex::new(&format!(r"(?i)\b{}[- ]team", "red")).expect("regex"),
        regex::Regex::new(&format!(r"(?i)\breview {}", "round")).expect("regex"),
    ];
    let mut hits = Vec::new();
    for file in project_text_files() {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for (i, line) in text.lines().enumerate() {
            if patterns.iter().any(|p| p.is_match(line)) {
                hits.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(hits.is_empty(), "development history in the project's text:\n{}", hits.join("\n"));
}

#[test]
fn every_database_table_is_in_the_changelog() {
    // A table added or renamed changes the database's format: CHANGELOG.md must say so (and the
    // version move with it).
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).expect("CHANGELOG.md");
    let re = regex::Regex::new(r#"TableDefinition::new\("([a-z0-9_]+)"\)"#).expect("regex");
    let mut tables = Vec::new();
    for file in project_text_files().into_iter().filter(|f| f.starts_with(root().join("src"))) {
        let text = std::fs::read_to_string(&file).expect("source");
        tables.extend(re.captures_iter(&text).map(|c| c[1].to_string()));
    }
    assert!(tables.len() >= 10, "only {} tables found in src/", tables.len());
    let missing: Vec<&String> = tables.iter().filter(|t| !changelog.contains(&format!("`{t}`"))).collect();
    assert!(missing.is_empty(), "tables CHANGELOG.md does not name: {missing:?}");
}

/// Every test the threat model's table names exists: each script named with its section numbers
/// (`tests/e2e_cri.sh` 5e, 5h) has those sections (a `log "N.` heading, or checks described
/// `"N: ...`), and each Rust test function named in parentheses (a name ending in `...` is a
/// prefix) is defined in src/ or tests/. A row whose test was renamed or removed fails here.
#[test]
fn every_test_the_threat_model_names_exists() {
    let doc = std::fs::read_to_string(root().join("docs/threat-model.md")).expect("threat model");
    let script_ref = regex::Regex::new(r"`(tests/[a-z0-9_]+\.sh)`((?:,? [0-9]+[a-z]?\b)*)").expect("regex");
    let fn_ref = regex::Regex::new(r"`([a-z][a-z0-9_]{8,})(\.\.\.)?`").expect("regex");
    let parens = regex::Regex::new(r"\(([^()]*)\)").expect("regex");
    let mut rust = String::new();
    for dir in ["src", "tests"] {
        for e in walkdir::WalkDir::new(root().join(dir)).into_iter().filter_map(Result::ok) {
            if e.path().extension().is_some_and(|x| x == "rs") {
                rust.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    let (mut missing, mut sections, mut functions) = (Vec::new(), 0, 0);
    let table = doc.lines().skip_while(|l| !l.starts_with("| attack |")).take_while(|l| l.starts_with('|'));
    for row in table.skip(2) {
        // The cells that name tests: the test column and the control column.
        let cells: Vec<&str> = row.split(" | ").collect();
        let named = cells.get(2..).map(|c| c.join(" | ")).unwrap_or_default();
        for c in script_ref.captures_iter(&named) {
            let script = std::fs::read_to_string(root().join(&c[1])).unwrap_or_else(|_| panic!("{} (named in the threat model) exists", &c[1]));
            for n in c[2].split([',', ' ']).filter(|t| !t.is_empty()) {
                sections += 1;
                let heading = format!("log \"{n}.");
                let described = format!("\"{n}: ");
                if !script.contains(&heading) && !script.contains(&described) {
                    missing.push(format!("{} has no section {n}", &c[1]));
                }
            }
        }
        let in_parentheses: Vec<&str> = parens.captures_iter(&named).filter_map(|c| c.get(1)).map(|m| m.as_str()).collect();
        for c in in_parentheses.iter().flat_map(|p| fn_ref.captures_iter(p)) {
            let name = &c[1];
            if !name.contains('_') {
                continue;
            }
            functions += 1;
            let found = match c.get(2) {
                Some(_) => rust.contains(&format!("fn {name}")),
                None => rust.contains(&format!("fn {name}(")),
            };
            if !found {
                missing.push(format!("no test function {name}"));
            }
        }
    }
    assert!(sections > 50 && functions > 20, "the table names {sections} sections and {functions} functions: the parser missed the table");
    assert!(missing.is_empty(), "the threat model names tests that do not exist:\n{}", missing.join("\n"));
}

/// Every synopsis in a `text` block (a line `pullgate SUBCOMMAND [-n NS] [--flag ...] ...`, as
/// docs/using.md lists them) names a subcommand pullgate has and only options that subcommand
/// takes: a flag renamed or removed fails here, as in the `sh` blocks above.
#[test]
fn every_synopsis_names_options_that_exist() {
    let cli = Cli::command();
    let option = regex::Regex::new(r"(?:^|[\s\[|(])(--?[A-Za-z][A-Za-z0-9-]*)").expect("regex");
    let (mut seen, mut wrong) = (0, Vec::new());
    for block in blocks_of("text") {
        for (i, line) in block.text.lines().enumerate() {
            let mut words = line.split_whitespace();
            let (Some(program), Some(sub)) = (words.next(), words.next()) else { continue };
            if program != "pullgate" {
                continue;
            }
            // Output that begins with the program's name ("pullgate denied ...") is not a synopsis.
            let Some(cmd) = cli.find_subcommand(sub) else { continue };
            seen += 1;
            let rest = &line[line.find(sub).map(|p| p + sub.len()).unwrap_or(0)..];
            for c in option.captures_iter(rest) {
                let flag = &c[1];
                let known = cmd.get_arguments().any(|a| match flag.strip_prefix("--") {
                    Some(long) => a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|al| al.contains(&long)),
                    None => flag.len() == 2 && a.get_short() == flag.chars().nth(1),
                }) || matches!(flag, "-h" | "--help");
                if !known {
                    wrong.push(format!("{}:{}: pullgate {sub} has no option {flag}", block.file.display(), block.line + 1 + i));
                }
            }
        }
    }
    assert!(seen >= 10, "found {seen} synopses in text blocks: the reader missed them");
    assert!(wrong.is_empty(), "synopses name options that do not exist:\n{}", wrong.join("\n"));
}
