//! Validating the Python script of a custom tool, with a real Python parser
//! (`rustpython-parser`, pinned). Tool uploads and the runner's `POST /tools/validation` use it.
//!
//! A valid script is UTF-8, at most [`MAX_SCRIPT_BYTES`], nested no deeper than CPython accepts
//! (see [`nesting`]), parses as a Python 3 module, and defines the entry point at top level:
//! `def run(...)` or `async def run(...)`. The runner calls `run` with the tool's arguments as
//! keyword arguments and uses its return value as the result.
//!
//! Why the nesting limits: the parser itself is a table-driven LR parser (no recursion), but the
//! tree it builds is freed recursively (`Box<Expr>` inside `Box<Expr>`), and assignment targets
//! are rewritten recursively while parsing. `x = ------…1` with 250,000 minus signs overflowed the
//! stack and aborted the whole process. A lexical pre-check bounds the depth of every tree before
//! anything is parsed, and the parse runs on a thread of its own with a known stack,
//! [`PARSER_STACK_BYTES`], many times what the deepest accepted script needs.

use rustpython_parser::source_code::RandomLocator;
use rustpython_parser::text_size::TextSize;
use rustpython_parser::{Mode, ast};
use serde::Serialize;

/// Largest accepted script.
pub const MAX_SCRIPT_BYTES: usize = 256 * 1024;

/// The function every custom tool script defines.
pub const ENTRY_POINT: &str = "run";

/// Stack of the thread that parses a script. The deepest scripts [`nesting`] lets through need
/// under 1 MiB in a debug build (less in release; the property tests check 2 MiB), so the margin
/// is wide; only the pages a parse touches are used.
pub const PARSER_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Why a script was refused; syntax and nesting errors carry their 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScriptProblem {
    pub message: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

impl ScriptProblem {
    fn general(message: impl Into<String>) -> Self {
        Self { message: message.into(), line: None, column: None }
    }

    fn at(source: &str, offset: TextSize, message: String) -> Self {
        let location = RandomLocator::new(source).locate(offset);
        Self { message, line: Some(location.row.get()), column: Some(location.column.get()) }
    }
}

/// Checks a custom tool script: `Ok(())` when it is valid, otherwise the first problem found
/// (size, emptiness, nesting, syntax, then the entry point).
pub fn validate_script(source: &str) -> Result<(), ScriptProblem> {
    if source.len() > MAX_SCRIPT_BYTES {
        return Err(ScriptProblem::general(format!("the script is larger than {MAX_SCRIPT_BYTES} bytes")));
    }
    if source.trim().is_empty() {
        return Err(ScriptProblem::general("the script is empty"));
    }
    nesting::check(source)?;
    // The parse (and the freeing of its tree) runs where the stack is known, whatever thread
    // calls this: a tokio worker has 2 MiB, of which the request has already used some.
    parse_on_own_thread(source, PARSER_STACK_BYTES)
}

fn parse_on_own_thread(source: &str, stack_bytes: usize) -> Result<(), ScriptProblem> {
    let parsed = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("python-script-parser".into())
            .stack_size(stack_bytes)
            .spawn_scoped(scope, || parse_module(source))
            .map(|parser| parser.join())
    });
    match parsed {
        Ok(Ok(result)) => result,
        // A parser bug: the panic hook has logged it; the script is refused, the process lives.
        Ok(Err(_panic)) => Err(ScriptProblem::general("the script could not be parsed")),
        Err(err) => Err(ScriptProblem::general(format!("the script could not be checked now ({err}); try again"))),
    }
}

fn parse_module(source: &str) -> Result<(), ScriptProblem> {
    let module = rustpython_parser::parse(source, Mode::Module, "<tool>")
        .map_err(|err| ScriptProblem::at(source, err.offset, format!("syntax error: {}", err.error)))?;
    let ast::Mod::Module(module) = module else {
        return Err(ScriptProblem::general("the script is not a module"));
    };
    let defines_entry_point = module.body.iter().any(|statement| match statement {
        ast::Stmt::FunctionDef(function) => function.name.as_str() == ENTRY_POINT,
        ast::Stmt::AsyncFunctionDef(function) => function.name.as_str() == ENTRY_POINT,
        _ => false,
    });
    if defines_entry_point {
        Ok(())
    } else {
        Err(ScriptProblem::general(format!("the script must define a top-level function `{ENTRY_POINT}`")))
    }
}

pub mod nesting {
    //! The lexical pre-check: bounds on how deep the parser's tree can get, read from the
    //! tokens alone (no tree is built, nothing recurses), with CPython's own limits where it has
    //! them.
    //!
    //! - Brackets `(`, `[`, `{` nest at most [`MAX_BRACKET_DEPTH`] deep (CPython: "too many
    //!   nested parentheses").
    //! - Blocks indent at most [`MAX_INDENT_DEPTH`] levels (CPython: "too many levels of
    //!   indentation").
    //! - Block depth, counting each `elif` of a chain as one more level (an `elif` is an `if`
    //!   inside the previous `else`), is at most [`MAX_BLOCK_DEPTH`].
    //! - The expression depth of each statement is at most [`MAX_EXPRESSION_DEPTH`] (CPython
    //!   stops near 3,000 with "maximum recursion depth exceeded during compilation"). It is an
    //!   upper bound computed per bracket level: every operator, keyword, dot, colon and opening
    //!   bracket between two commas counts one level (`lambda` two), plus the deepest bracket
    //!   group or f-string replacement field in between. So `-` × 250,000, `1+1+…`, `a.b.c…`,
    //!   `a()()…`, `lambda: lambda: …`, `x if c else y if …` all count, and long flat lists
    //!   (`[-1, -2, …]`) do not.

    use super::ScriptProblem;
    use rustpython_parser::lexer::lex;
    use rustpython_parser::text_size::TextSize;
    use rustpython_parser::{Mode, StringKind, Tok};

    /// Deepest bracket nesting.
    pub const MAX_BRACKET_DEPTH: usize = 200;
    /// Most indentation levels.
    pub const MAX_INDENT_DEPTH: usize = 100;
    /// Deepest block nesting, each `elif` counting one level.
    pub const MAX_BLOCK_DEPTH: usize = 3000;
    /// Deepest expression (the estimate described above) of one statement.
    pub const MAX_EXPRESSION_DEPTH: usize = 3000;

    /// Refuses a script whose parse tree could be deeper than the limits. A script the lexer
    /// refuses is left to the parser, which stops at the same token: the tokens before it were
    /// checked.
    pub fn check(source: &str) -> Result<(), ScriptProblem> {
        let mut statement = Statement::default();
        let mut blocks = Blocks::default();
        let mut at_line_start = true;
        for token in lex(source, Mode::Module) {
            let Ok((token, range)) = token else { break };
            let start = range.start();
            if at_line_start && !matches!(token, Tok::Indent | Tok::Dedent | Tok::Newline) {
                blocks.statement(&token, source, start)?;
                statement.start = start;
                at_line_start = false;
            }
            match token {
                Tok::Newline | Tok::EndOfFile => {
                    statement.finish(source)?;
                    at_line_start = true;
                }
                Tok::Semi if statement.levels.len() == 1 => statement.finish(source)?,
                Tok::Indent => blocks.indent(source, start)?,
                Tok::Dedent => blocks.dedent(),
                Tok::Lpar | Tok::Lsqb | Tok::Lbrace => statement.open(source, start)?,
                Tok::Rpar | Tok::Rsqb | Tok::Rbrace => statement.close(),
                Tok::Comma => statement.top().comma(),
                Tok::Lambda => {
                    let level = statement.top();
                    level.operators += 2;
                    level.open_lambdas += 1;
                }
                Tok::Colon => {
                    let level = statement.top();
                    level.operators += 1;
                    level.open_lambdas = level.open_lambdas.saturating_sub(1);
                }
                Tok::String { value, kind: kind @ (StringKind::FString | StringKind::RawFString), .. } => {
                    let fields = fstring_field_length(&value, kind == StringKind::RawFString);
                    // JoinedStr, FormattedValue, a format spec's JoinedStr and FormattedValue.
                    statement.top().group(fields + 4);
                }
                Tok::Name { .. }
                | Tok::Int { .. }
                | Tok::Float { .. }
                | Tok::Complex { .. }
                | Tok::String { .. }
                | Tok::True
                | Tok::False
                | Tok::None
                | Tok::Ellipsis
                | Tok::StartModule
                | Tok::StartInteractive
                | Tok::StartExpression => {}
                _ => statement.top().operators += 1,
            }
        }
        // Whatever was read before a lexical error (or the end) is what the parser builds.
        statement.finish(source)
    }

    /// The expression depth bound of the statement being read.
    struct Statement {
        /// Open bracket levels; the first is the statement itself.
        levels: Vec<Level>,
        start: TextSize,
    }

    impl Default for Statement {
        fn default() -> Self {
            Self { levels: vec![Level::default()], start: TextSize::default() }
        }
    }

    impl Statement {
        fn top(&mut self) -> &mut Level {
            if self.levels.is_empty() {
                self.levels.push(Level::default());
            }
            let last = self.levels.len() - 1;
            &mut self.levels[last]
        }

        fn open(&mut self, source: &str, at: TextSize) -> Result<(), ScriptProblem> {
            self.top().operators += 1;
            if self.levels.len() > MAX_BRACKET_DEPTH {
                return Err(ScriptProblem::at(
                    source,
                    at,
                    format!("brackets are nested more than {MAX_BRACKET_DEPTH} deep"),
                ));
            }
            self.levels.push(Level::default());
            Ok(())
        }

        fn close(&mut self) {
            if self.levels.len() > 1
                && let Some(inner) = self.levels.pop()
            {
                self.top().group(inner.depth());
            }
        }

        /// Ends the statement (also with brackets left open), checking its depth.
        fn finish(&mut self, source: &str) -> Result<(), ScriptProblem> {
            while self.levels.len() > 1 {
                self.close();
            }
            let depth = std::mem::take(&mut self.levels).pop().map_or(0, Level::depth);
            self.levels = vec![Level::default()];
            if depth > MAX_EXPRESSION_DEPTH {
                return Err(ScriptProblem::at(
                    source,
                    self.start,
                    format!(
                        "the statement is nested too deeply: more than {MAX_EXPRESSION_DEPTH} levels of operators, \
                         calls, attributes or brackets"
                    ),
                ));
            }
            Ok(())
        }
    }

    /// One bracket level of a statement, read between commas.
    #[derive(Default)]
    struct Level {
        /// Operators, keywords and opening brackets since the last comma.
        operators: usize,
        /// The deepest bracket group or f-string field since the last comma.
        deepest_group: usize,
        /// The deepest stretch between commas so far.
        deepest: usize,
        /// `lambda`s whose parameter list (which has commas) is still open.
        open_lambdas: usize,
    }

    impl Level {
        fn group(&mut self, depth: usize) {
            self.deepest_group = self.deepest_group.max(depth);
        }

        fn comma(&mut self) {
            if self.open_lambdas == 0 {
                self.end_stretch();
            }
        }

        fn end_stretch(&mut self) {
            self.deepest = self.deepest.max(self.operators.saturating_add(self.deepest_group).saturating_add(1));
            self.operators = 0;
            self.deepest_group = 0;
        }

        /// The level's depth bound: its deepest stretch, plus the node holding the stretches
        /// (a tuple, list, call…) and one for the nodes a comma's neighbours share.
        fn depth(mut self) -> usize {
            self.end_stretch();
            self.deepest.saturating_add(2)
        }
    }

    /// Block nesting: one entry per indentation level, holding its current `elif` chain.
    struct Blocks {
        elif_chains: Vec<usize>,
    }

    impl Default for Blocks {
        fn default() -> Self {
            Self { elif_chains: vec![0] }
        }
    }

    impl Blocks {
        fn indent(&mut self, source: &str, at: TextSize) -> Result<(), ScriptProblem> {
            self.elif_chains.push(0);
            if self.elif_chains.len() - 1 > MAX_INDENT_DEPTH {
                return Err(ScriptProblem::at(
                    source,
                    at,
                    format!("too many levels of indentation (more than {MAX_INDENT_DEPTH})"),
                ));
            }
            Ok(())
        }

        fn dedent(&mut self) {
            if self.elif_chains.len() > 1 {
                self.elif_chains.pop();
            }
        }

        /// A statement starts with `first` at the current indentation.
        fn statement(&mut self, first: &Tok, source: &str, at: TextSize) -> Result<(), ScriptProblem> {
            let last = self.elif_chains.len() - 1;
            match first {
                Tok::Elif => self.elif_chains[last] += 1,
                Tok::Else => {}
                _ => self.elif_chains[last] = 0,
            }
            let depth: usize = self.elif_chains.iter().map(|chain| chain + 1).sum();
            if depth > MAX_BLOCK_DEPTH {
                return Err(ScriptProblem::at(
                    source,
                    at,
                    format!("blocks are nested too deeply: more than {MAX_BLOCK_DEPTH} levels, counting each elif"),
                ));
            }
            Ok(())
        }
    }

    /// The longest replacement field expression (in characters) of an f-string's content,
    /// reading fields exactly as `rustpython-parser` does, up to where it would fail. Every node
    /// of a field's tree holds at least one character, so this bounds the field's depth.
    pub(super) fn fstring_field_length(content: &str, raw: bool) -> usize {
        let mut reader = FString { chars: content.chars().collect(), at: 0, raw, longest: 0 };
        let _ = reader.literal(0);
        reader.longest
    }

    struct FString {
        chars: Vec<char>,
        at: usize,
        raw: bool,
        longest: usize,
    }

    impl FString {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.at).copied()
        }

        fn next(&mut self) -> Option<char> {
            let ch = self.peek()?;
            self.at += 1;
            Some(ch)
        }

        /// The literal text with its fields (`parse_fstring`); `None` where the parser fails.
        fn literal(&mut self, nested: u8) -> Option<()> {
            if nested >= 2 {
                return None;
            }
            while let Some(ch) = self.peek() {
                match ch {
                    '{' => {
                        self.at += 1;
                        if nested == 0 {
                            match self.peek() {
                                Some('{') => {
                                    self.at += 1;
                                    continue;
                                }
                                None => return None,
                                Some(_) => {}
                            }
                        }
                        self.field(nested)?;
                    }
                    '}' => {
                        if nested > 0 {
                            break;
                        }
                        self.at += 1;
                        if self.next()? != '}' {
                            return None;
                        }
                    }
                    '\\' if !self.raw => {
                        self.at += 1;
                        match self.peek()? {
                            '{' | '}' => {}
                            'N' => {
                                self.at += 1;
                                if self.next()? != '{' {
                                    return None;
                                }
                                while self.next()? != '}' {}
                            }
                            _ => self.at += 1,
                        }
                    }
                    _ => self.at += 1,
                }
            }
            Some(())
        }

        /// One replacement field after its `{` (`parse_formatted_value`).
        fn field(&mut self, nested: u8) -> Option<()> {
            let mut length = 0usize;
            let mut delimiters = Vec::new();
            let mut self_documenting = false;
            while let Some(ch) = self.next() {
                match ch {
                    '!' | '=' | '>' | '<' if self.peek() == Some('=') => {
                        length += 2;
                        self.at += 1;
                    }
                    '!' if delimiters.is_empty() => {
                        if !matches!(self.next()?, 's' | 'a' | 'r') || !matches!(self.peek()?, '}' | ':') {
                            return None;
                        }
                    }
                    '=' if delimiters.is_empty() => self_documenting = true,
                    ':' if delimiters.is_empty() => self.spec(nested)?,
                    '(' | '{' | '[' => {
                        length += 1;
                        delimiters.push(ch);
                    }
                    ')' | ']' | '}' if !delimiters.is_empty() => {
                        let open = delimiters.pop()?;
                        if !matches!((open, ch), ('(', ')') | ('[', ']') | ('{', '}')) {
                            return None;
                        }
                        length += 1;
                    }
                    ')' | ']' => return None,
                    '}' => {
                        self.longest = self.longest.max(length);
                        return Some(());
                    }
                    '"' | '\'' => {
                        length += 1;
                        loop {
                            let c = self.next()?;
                            length += 1;
                            if c == ch {
                                break;
                            }
                        }
                    }
                    ' ' if self_documenting => {}
                    '\\' => return None,
                    _ => {
                        if self_documenting {
                            return None;
                        }
                        length += 1;
                    }
                }
            }
            None
        }

        /// A format spec after `:` (`parse_spec`), with its nested fields.
        fn spec(&mut self, nested: u8) -> Option<()> {
            while let Some(ch) = self.peek() {
                match ch {
                    '{' => {
                        self.literal(nested + 1)?;
                        continue;
                    }
                    '}' => break,
                    _ => self.at += 1,
                }
            }
            Some(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_with_a_top_level_run_are_valid() {
        assert_eq!(
            validate_script("import json\n\ndef run(city: str) -> str:\n    return json.dumps({'city': city})\n"),
            Ok(())
        );
        assert_eq!(validate_script("async def run(**kwargs):\n    return kwargs\n"), Ok(()));
    }

    #[test]
    fn syntax_errors_report_line_and_column() {
        let problem = validate_script("def run():\n    return (1 +\n\nx = ]\n").unwrap_err();
        assert!(problem.message.starts_with("syntax error"), "{problem:?}");
        assert!(problem.line.is_some_and(|line| line >= 2), "{problem:?}");
        assert!(problem.column.is_some());
        let problem = validate_script("def run(:\n    pass\n").unwrap_err();
        assert_eq!((problem.line, problem.column), (Some(1), Some(9)));
    }

    #[test]
    fn the_entry_point_must_be_a_top_level_function() {
        for source in ["def main():\n    pass\n", "class T:\n    def run(self):\n        pass\n", "run = lambda: 1\n"] {
            let problem = validate_script(source).unwrap_err();
            assert!(problem.message.contains("`run`"), "{source}: {problem:?}");
        }
    }

    #[test]
    fn empty_and_oversized_scripts_are_refused() {
        assert!(validate_script("  \n").unwrap_err().message.contains("empty"));
        let huge = format!("def run():\n    return 1\n{}", "#".repeat(MAX_SCRIPT_BYTES));
        assert!(validate_script(&huge).unwrap_err().message.contains("larger"));
    }

    fn refusal(source: &str) -> ScriptProblem {
        validate_script(source).expect_err("the script should be refused")
    }

    fn with_run(line: &str) -> String {
        format!("def run():\n    pass\n{line}\n")
    }

    #[test]
    fn the_unary_chain_of_issue_9_is_refused_not_a_crash() {
        // Issue 9, point 5: this aborted the process ("has overflowed its stack").
        let source = format!("def run():\n    pass\nx={}1", "-".repeat(250_000));
        let problem = refusal(&source);
        assert!(problem.message.contains("nested too deeply"), "{problem:?}");
        assert_eq!((problem.line, problem.column), (Some(3), Some(1)));
    }

    #[test]
    fn the_deepest_trees_at_the_size_limit_are_refused() {
        let room = MAX_SCRIPT_BYTES - 64;
        let fill = |unit: &str, close: &str| {
            let n = room / (unit.len() + close.len());
            with_run(&format!("x = {}1{}", unit.repeat(n), close.repeat(n)))
        };
        let chain = |unit: &str| with_run(&format!("x = a{}", unit.repeat(room / unit.len())));
        let cases = [
            ("unary", fill("-", "")),
            ("not", fill("not ", "")),
            ("binary", chain("+1")),
            ("power", chain("**1")),
            ("attributes", chain(".b")),
            ("calls", chain("()")),
            ("subscripts", chain("[0]")),
            ("conditionals", chain(" if c else 1")),
            ("brackets", fill("[", "]")),
            ("parentheses", fill("(", ")")),
            ("dicts", fill("{1:", "}")),
            ("lambdas", fill("lambda:", "")),
            ("lambdas with parameters", fill("lambda a, b:", "")),
            ("comprehensions", fill("[x for x in ", "]")),
            ("awaits", fill("await ", "")),
            ("targets", with_run(&format!("{}x{} = 1", "[".repeat(100_000), "]".repeat(100_000)))),
            ("f-string", with_run(&format!("x = f'{{{}1}}'", "-".repeat(room - 16)))),
            ("binary then a lexical error", with_run(&format!("x = 1{} $", "+1".repeat(room / 2 - 4)))),
            ("elif chain", format!("def run():\n    pass\nif a:\n pass\n{}", "elif a:\n pass\n".repeat(room / 16))),
            ("indentation", {
                let mut source = String::from("def run():\n    pass\n");
                for level in 0..700 {
                    source.push_str(&format!("{}if a:\n", "\t".repeat(level)));
                }
                source.push_str(&format!("{}pass\n", "\t".repeat(700)));
                source
            }),
        ];
        for (name, source) in cases {
            assert!(source.len() <= MAX_SCRIPT_BYTES, "{name}: {} bytes", source.len());
            let problem = refusal(&source);
            assert!(problem.line.is_some(), "{name}: {problem:?}");
            assert!(["nested", "indentation"].iter().any(|word| problem.message.contains(word)), "{name}: {problem:?}");
        }
    }

    #[test]
    fn nesting_up_to_the_limits_is_accepted() {
        use nesting::*;
        // Brackets as deep as CPython allows, then one more.
        let deepest = MAX_BRACKET_DEPTH;
        assert_eq!(validate_script(&with_run(&format!("x = {}1{}", "[".repeat(deepest), "]".repeat(deepest)))), Ok(()));
        let problem = refusal(&with_run(&format!("x = {}1{}", "(".repeat(deepest + 1), ")".repeat(deepest + 1))));
        assert!(problem.message.contains("brackets are nested more than 200"), "{problem:?}");
        assert_eq!(problem.line, Some(3));
        // Operator chains just under the expression limit, and one over it.
        let chain = MAX_EXPRESSION_DEPTH - 10;
        assert_eq!(validate_script(&with_run(&format!("x = {}1", "-".repeat(chain)))), Ok(()));
        assert_eq!(validate_script(&with_run(&format!("x = 1{}", "+1".repeat(chain)))), Ok(()));
        let problem = refusal(&with_run(&format!("x = 1{}", "+1".repeat(MAX_EXPRESSION_DEPTH))));
        assert!(problem.message.contains("nested too deeply"), "{problem:?}");
        // Long flat displays are not deep.
        assert_eq!(validate_script(&with_run(&format!("x = [{}]", "-1, ".repeat(20_000)))), Ok(()));
        assert_eq!(validate_script(&with_run(&format!("x = {{{}}}", "'k': -1, ".repeat(10_000)))), Ok(()));
        // Indentation up to CPython's limit, then too much.
        let blocks = |levels: usize| {
            let mut source = String::from("def run():\n");
            for level in 1..levels {
                source.push_str(&format!("{}if a:\n", " ".repeat(level)));
            }
            source.push_str(&format!("{}pass\n", " ".repeat(levels)));
            source
        };
        assert_eq!(validate_script(&blocks(MAX_INDENT_DEPTH)), Ok(()));
        assert!(refusal(&blocks(MAX_INDENT_DEPTH + 1)).message.contains("indentation"));
        // A long elif chain is fine up to the block limit.
        let elifs = |n: usize| {
            format!("def run(a):\n    if a == 0:\n        pass\n{}", "    elif a:\n        pass\n".repeat(n))
        };
        assert_eq!(validate_script(&elifs(MAX_BLOCK_DEPTH - 10)), Ok(()));
        assert!(refusal(&elifs(MAX_BLOCK_DEPTH)).message.contains("blocks are nested too deeply"));
    }

    #[test]
    fn the_deepest_accepted_trees_fit_the_parser_stack() {
        use nesting::*;
        // Every kind of depth at once, each near its limit, inside one another.
        let depth = MAX_EXPRESSION_DEPTH / 4;
        let mut source = String::from("def run(a):\n    if a:\n        pass\n");
        source.push_str(&"    elif a:\n        pass\n".repeat(MAX_BLOCK_DEPTH - MAX_INDENT_DEPTH - 10));
        source.push_str("    else:\n");
        for level in 3..MAX_INDENT_DEPTH {
            source.push_str(&format!("{}if a:\n", " ".repeat(level * 2)));
        }
        let indent = " ".repeat(MAX_INDENT_DEPTH * 2);
        let brackets = MAX_BRACKET_DEPTH - 5;
        source.push_str(&format!(
            "{indent}x = {}{}{}1{}{}\n",
            "lambda: ".repeat(depth / 4),
            "-".repeat(depth),
            "[".repeat(brackets),
            "]".repeat(brackets),
            "+1".repeat(depth),
        ));
        source.push_str(&format!(
            "{indent}[{}y{}] = f'''{{f\"{{ {}1 }}\"}}'''\n",
            "[".repeat(brackets),
            "]".repeat(brackets),
            "-".repeat(MAX_EXPRESSION_DEPTH - 20),
        ));
        assert!(source.len() <= MAX_SCRIPT_BYTES);
        assert_eq!(validate_script(&source), Ok(()));
    }

    #[test]
    fn fstring_fields_are_measured_as_the_parser_reads_them() {
        use nesting::fstring_field_length as length;
        assert_eq!(length("plain {{text}} only", false), 0);
        assert_eq!(length("a {x} b {long_name!r:>{width}} c", false), 9);
        assert_eq!(length("{'}}' + x}", false), 8);
        assert_eq!(length("\\N{DASH} {ab}", false), 2);
        assert_eq!(length("{x:{yz}}", false), 2);
        assert_eq!(length(&format!("{{{}1}}", "-".repeat(5000)), false), 5001);
        // Where the parser fails, only the fields before count.
        assert_eq!(length("{ab} {x!z} {long_field}", false), 2);
        assert_eq!(length("{abc", false), 0);
        assert_eq!(length("{x:{y:{z}}}", false), 0);
    }

    mod properties {
        //! Property tests: any script gets `Ok` or a problem (no panic, no crash), and whatever
        //! the nesting check lets through is parsed and freed within 2 MiB of stack (a tokio
        //! worker's), an eighth of what the parser thread has.

        use super::super::*;
        use proptest::prelude::*;

        const FRAGMENTS: &[&str] = &[
            "-",
            "+1",
            "not ",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            "lambda:",
            "lambda a, b:",
            " if 1 else ",
            "a",
            ".b",
            "()",
            "[0]",
            ",",
            ":",
            "await ",
            "*",
            "**",
            "f'{",
            "}'",
            "f\"{x:{y}}\"",
            "'s'",
            "\n",
            " ",
            "\t",
            "elif a:\n",
            "if a:\n",
            "    ",
            "x = ",
            "for x in ",
            "yield ",
            " := ",
            ";",
            "@",
            "=",
            "1",
            "\\\n",
            "#",
            "\"\"\"",
            "def f(",
            "class C:\n",
            "match x:\n case [",
            "é",
            "\0",
        ];

        /// Scripts made of Python fragments, each repeated up to `repeat` times.
        fn scripts(repeat: usize) -> impl Strategy<Value = String> {
            prop::collection::vec((0..FRAGMENTS.len(), 1..=repeat), 1..12).prop_map(|pieces| {
                let mut source = String::from("def run():\n    pass\n");
                for (fragment, times) in pieces {
                    source.push_str(&FRAGMENTS[fragment].repeat(times));
                }
                let mut end = source.len().min(MAX_SCRIPT_BYTES);
                while !source.is_char_boundary(end) {
                    end -= 1;
                }
                source.truncate(end);
                source
            })
        }

        /// The whole validator, with the parser thread's stack cut to `stack_bytes`.
        fn validate_with_stack(source: &str, stack_bytes: usize) -> Result<(), ScriptProblem> {
            nesting::check(source)?;
            parse_on_own_thread(source, stack_bytes)
        }

        fn assert_documented(source: &str, result: Result<(), ScriptProblem>) -> Result<(), TestCaseError> {
            if let Err(problem) = result {
                prop_assert!(!problem.message.is_empty());
                prop_assert_ne!(problem.message.as_str(), "the script could not be parsed", "the parser panicked");
                let lines = u32::try_from(source.lines().count()).unwrap_or(u32::MAX);
                prop_assert!(
                    problem.line.is_none_or(|line| line >= 1 && line <= lines.saturating_add(1)),
                    "{:?}",
                    problem
                );
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            #[test]
            fn any_short_script_gets_an_answer(source in scripts(4)) {
                assert_documented(&source, validate_script(&source))?;
            }

            #[test]
            fn any_text_gets_an_answer(source in any::<String>()) {
                assert_documented(&source, validate_script(&source))?;
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]

            #[test]
            fn deep_scripts_fit_a_tokio_worker_stack(source in scripts(40_000)) {
                assert_documented(&source, validate_with_stack(&source, 2 * 1024 * 1024))?;
            }
        }
    }
}
