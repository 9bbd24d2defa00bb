//! The guide (`docs/guide`) and the README point at files that exist, and the guide's summary
//! lists every chapter: a moved or renamed file breaks this test, not a reader's click.

use std::fs;
use std::path::{Path, PathBuf};

/// Where links into this repository on GitHub start; what follows is a path in the repository.
const REPOSITORY: &str = "https://github.com/guestlist-rs/guestlist/";

/// The root of the repository.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The guide's chapters and its summary: every `.md` file in `docs/guide/src`, sorted.
fn chapters() -> Vec<PathBuf> {
    let src = root().join("docs/guide/src");
    let entries =
        fs::read_dir(&src).unwrap_or_else(|err| panic!("cannot read {}: {err}", src.display()));
    let mut chapters: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    chapters.sort();
    assert!(!chapters.is_empty(), "no chapters in {}", src.display());
    chapters
}

/// `path` as written from the root of the repository, for messages.
fn shown(path: &Path) -> String {
    let root = root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// The text of a markdown file without its fenced code blocks and inline code spans, which hold
/// code, not links.
fn prose(markdown: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut fence: Option<&str> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(marker)) => fence = Some(marker),
            (Some(open), Some(marker)) if open == marker => fence = None,
            (None, None) => lines.push((index + 1, without_code_spans(line))),
            _ => {}
        }
    }
    lines
}

/// `line` with every `` `code` `` span removed.
fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(index, _)| index % 2 == 0)
        .map(|(_, part)| part)
        .collect()
}

/// The targets of the markdown links on a line: inline `[text](target "title")` and reference
/// definitions `[name]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(after[..end].to_owned());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some((_, target)) = trimmed.split_once("]:")
    {
        targets.push(target.to_owned());
    }
    targets
        .into_iter()
        .map(|target| {
            // Drop a title, then angle brackets around the destination.
            let target = target.split_whitespace().next().unwrap_or_default();
            target
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        })
        .filter(|target| !target.is_empty())
        .collect()
}

/// Every link in `files` as (file, line number, target).
fn links(files: &[PathBuf]) -> Vec<(PathBuf, usize, String)> {
    let mut found = Vec::new();
    for file in files {
        for (number, line) in prose(&read(file)) {
            for target in link_targets(&line) {
                found.push((file.clone(), number, target));
            }
        }
    }
    found
}

/// `true` for a link that leaves this checkout or stays on its page.
fn is_external_or_anchor(target: &str) -> bool {
    ["http:", "https:", "mailto:", "#"]
        .iter()
        .any(|prefix| target.starts_with(prefix))
}

/// The relative links in `files` whose target does not exist, as messages.
fn broken_relative_links(files: &[PathBuf]) -> Vec<String> {
    links(files)
        .into_iter()
        .filter(|(_, _, target)| !is_external_or_anchor(target))
        .filter_map(|(file, number, target)| {
            let path = target.split('#').next().unwrap_or_default();
            let resolved = file.parent().expect("a file has a folder").join(path);
            (!resolved.exists())
                .then(|| format!("{}:{number}: `{target}` is not a file", shown(&file)))
        })
        .collect()
}

fn readme() -> PathBuf {
    root().join("README.md")
}

#[test]
fn every_relative_link_in_the_guide_points_at_a_file() {
    let broken = broken_relative_links(&chapters());
    assert!(
        broken.is_empty(),
        "broken links in the guide:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_readme_stays_a_front_door() {
    // The rest belongs in the guide, which has a chapter per part.
    let lines = read(&readme()).lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: move the detail into the guide (250 at most)"
    );
}

#[test]
fn every_relative_link_in_the_readme_points_at_a_file() {
    let broken = broken_relative_links(&[readme()]);
    assert!(
        broken.is_empty(),
        "broken links in the README:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_link_into_this_repository_names_a_path_that_exists() {
    // The guide links to the repository's files by their GitHub address (a relative link would
    // break in the built book); the path after `blob/main/` or `tree/main/` must exist here.
    let mut files = chapters();
    files.push(readme());
    let broken: Vec<String> = links(&files)
        .into_iter()
        .filter_map(|(file, number, target)| {
            let rest = target.strip_prefix(REPOSITORY)?;
            let path = rest
                .strip_prefix("blob/main/")
                .or_else(|| rest.strip_prefix("tree/main/"))?;
            let path = path.split('#').next().unwrap_or_default();
            (!root().join(path).exists()).then(|| {
                format!(
                    "{}:{number}: `{target}` names no path in the repository",
                    shown(&file)
                )
            })
        })
        .collect();
    assert!(
        broken.is_empty(),
        "broken links into the repository:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_include_in_the_guide_names_a_file() {
    let mut broken = Vec::new();
    for chapter in chapters() {
        for (number, line) in read(&chapter).lines().enumerate() {
            let Some(start) = line.find("{{#include ") else {
                continue;
            };
            let after = &line[start + "{{#include ".len()..];
            let Some(end) = after.find("}}") else {
                continue;
            };
            // `{{#include file:anchor}}` and `{{#include file:2:10}}` name the file before the colon.
            let path = after[..end].trim().split(':').next().unwrap_or_default();
            if !chapter
                .parent()
                .expect("a chapter has a folder")
                .join(path)
                .is_file()
            {
                broken.push(format!(
                    "{}:{}: `{path}` is not a file",
                    shown(&chapter),
                    number + 1
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken includes in the guide:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_chapter_is_listed_in_the_summary() {
    let chapters = chapters();
    let summary = chapters
        .iter()
        .find(|path| path.file_name().is_some_and(|name| name == "SUMMARY.md"))
        .expect("docs/guide/src/SUMMARY.md exists");
    let listed: Vec<String> = links(std::slice::from_ref(summary))
        .into_iter()
        .map(|(_, _, target)| target)
        .collect();
    let missing: Vec<String> = chapters
        .iter()
        .filter(|path| *path != summary)
        .map(|path| {
            let name = path.file_name().expect("a chapter has a name");
            name.to_string_lossy().into_owned()
        })
        .filter(|name| !listed.iter().any(|target| target == name))
        .collect();
    assert!(
        missing.is_empty(),
        "chapters not in SUMMARY.md (mdBook would leave them out of the book): {}",
        missing.join(", ")
    );
}
