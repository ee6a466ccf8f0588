//! Where in the file a TOML error is: its line and column, shown as the line with a caret.

/// An error's message, then where it is: `line 3, column 9`, the line, and a caret.
pub(super) fn located(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    let Some(span) = error.span() else {
        return message.to_owned();
    };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line_number = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let line = text[line_start..line_end].trim_end_matches('\r');
    let caret = " ".repeat(column - 1);
    format!("{message} (line {line_number}, column {column})\n    | {line}\n    | {caret}^")
}

#[cfg(test)]
mod tests {

    use crate::config::validate::errors_of as errors;

    #[test]
    fn a_syntax_error_points_at_its_line_and_column() {
        let text = "[server]\nlisten = \"127.0.0.1:8080\"\nmax_body_bytes = = 5\n";
        let errors = errors(text);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let lines: Vec<&str> = errors[0].lines().collect();
        assert!(lines[0].ends_with("(line 3, column 18)"), "{errors:?}");
        assert_eq!(lines[1], "    | max_body_bytes = = 5");
        assert_eq!(lines[2], "    |                  ^");
    }

    #[test]
    fn a_type_error_names_its_field_and_line() {
        let text = "[server]\nmax_body_bytes = \"big\"\n";
        let errors = errors(text);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("server.max_body_bytes: "),
            "{errors:?}"
        );
        assert!(errors[0].contains("(line 2, column 18)"), "{errors:?}");
    }

    #[test]
    fn a_bad_kind_is_one_error_that_lists_the_kinds() {
        let text = "[[providers]]\nname = \"a\"\nkind = \"opena1\"\n\
            [[routes]]\nname = \"r\"\nsteps = [{ provider = \"a\", model = \"m\" }]\n\
            [[routes]]\nname = \"s\"\nsteps = [{ provider = \"a\", model = \"n\" }]\n\
            [[prices]]\nprovider = \"a\"\nmodel = \"m\"\ninput_per_1m = 1.0\noutput_per_1m = 1.0\n";
        assert_eq!(
            errors(text),
            vec![
                "providers[0].kind: `opena1` is not one of `openai`, `anthropic`, `gemini`, `azure`, `vertex`, `bedrock`"
            ]
        );
    }
}
