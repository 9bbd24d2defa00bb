//! Reading the Prometheus text format, as far as the console needs it: each sample's name,
//! labels and value. (The one crate that parses the format whole brings a date library and a
//! second `itertools` for what is, here, a line split and a quoted string.)

/// One sample line: `name{label="value",...} value [timestamp]`.
#[derive(Debug, PartialEq)]
pub(crate) struct Sample<'a> {
    pub(crate) name: &'a str,
    labels: Vec<(&'a str, String)>,
    pub(crate) value: f64,
}

impl Sample<'_> {
    /// The value of the label `name`, if the sample has it.
    pub(crate) fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of `text`; comments, blank lines and lines that do not read are passed over.
pub(crate) fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(sample)
}

fn sample(line: &str) -> Option<Sample<'_>> {
    let end = line.find(['{', ' ', '\t'])?;
    let (name, mut rest) = line.split_at(end);
    let mut labels = Vec::new();
    if let Some(inside) = rest.strip_prefix('{') {
        rest = inside;
        loop {
            rest = rest.trim_start_matches([' ', ',']);
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (label, after) = rest.split_once('=')?;
            let (value, after) = quoted(after.trim_start().strip_prefix('"')?)?;
            labels.push((label.trim(), value));
            rest = after;
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// A label value up to its closing quote, its escapes (`\\`, `\"`, `\n`) undone, and what
/// follows the quote.
fn quoted(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[at + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_values_are_read_and_the_rest_passed_over() {
        let text = "# HELP x the help\n# TYPE x counter\n\
                    x{handler=\"a \\\"b\\\" \\\\ c\",outcome=\"duplicate\"} 12\n\
                    y 3.5 1700000000000\n\
                    z{} 1\n\
                    broken{handler=\"no end} 4\n\
                    nonumber{a=\"b\"}\n\
                    \n";
        let read: Vec<_> = samples(text).collect();
        assert_eq!(read.len(), 3, "{read:?}");
        assert_eq!(read[0].name, "x");
        assert_eq!(read[0].label("handler"), Some("a \"b\" \\ c"));
        assert_eq!(read[0].label("outcome"), Some("duplicate"));
        assert_eq!(read[0].label("other"), None);
        assert_eq!(read[0].value, 12.0);
        assert_eq!((read[1].name, read[1].value), ("y", 3.5));
        assert_eq!((read[2].name, read[2].value), ("z", 1.0));
    }
}
