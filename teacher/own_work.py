"""Is a graded answer the learner's own work? Decided from the notebook's SOURCE, in the grader's process.

The check inside the learner's kernel watches the calls an answer makes, but code in the same
process can switch any watcher off. Here nothing runs: the grader (trusted_grading.py) reads the
submitted notebook's cells and applies rules to their text, before and whatever the kernel did.

Each exercise has a rule set (`rules_for`), an allow-list of what its answer cell may use:
  - imports: torch (its public modules), math, numpy and a few plain standard modules
    (ALLOWED_IMPORTS); from tfmlib, only the helpers the exercise allows (those its reference
    itself uses, e.g. padding_mask and causal_mask in target_mask), imported by name;
  - never the exercise's reference, `solution`, or PyTorch's own version of the exercise
    (provenance.FORBIDDEN and the teacher's FORBIDDEN_CALLS), by any route that names it: a
    forbidden name covers the function and the Tensor method alike (`torch.tril` and `.tril()`),
    an import (`from torch import tril as t`) and getattr with the name as a string;
  - not a copy of the reference: the answer's code, names and comments aside, compared with the
    reference's (`copy_of`), where the reference is long enough for a copy to be told from an
    answer written independently.
And escape routes that fail in every cell the learner changed or added (ESCAPES): introspection and
code objects, profiling and threads, processes and files, PyTorch internals and private functions,
changing what other code uses (assigning to a module's or another object's attribute, binding an
answer's name outside its own cell), and the grader's hand-in.

Every finding is one line: which rule, and why it exists.
"""
from __future__ import annotations

import ast
import builtins
import difflib
import functools
import inspect
import textwrap
from dataclasses import dataclass, field

from tfmlib.exercises import REGISTRY
from tfmlib.exercises.provenance import FORBIDDEN, teachers_calls

# What the rules are for, said after each finding.
WHY = {
    "introspection": "introspection and code objects can run code, or the reference, that the "
                     "source does not show",
    "threads": "profiling hooks and threads run code outside the answer, where the grader does not look",
    "processes": "processes and files reach outside the notebook (the grader, other students, the reference)",
    "internals": "PyTorch's internals and private functions are its own kernels under other names",
    "changes": "changing what other code uses can change what the grader sees",
    "hand-in": "the hand-in belongs to the graded test cell alone",
    "imports": "an answer imports only torch, math, numpy and plain standard modules",
    "tfmlib": "from tfmlib an answer may use only the helpers this exercise allows",
    "reference": "the grader compares your code with the reference, so it cannot be the reference",
    "solution": "`solution` shows the reference to read, not to run as the answer",
    "built-in": "it is PyTorch's own version of what this exercise asks you to write",
    "copy": "an answer is written, not pasted: this one is the reference's code with small changes",
}

ALLOWED_IMPORTS = ("torch", "math", "numpy", "collections", "itertools", "typing", "dataclasses",
                   "string", "re", "unicodedata", "heapq", "bisect", "__future__")

# Escape routes, by rule: modules, builtins, attribute names and global names.
ESCAPE_MODULES = {
    "introspection": ("inspect", "types", "dis", "gc", "ast", "code", "codeop", "marshal", "pickle",
                      "copyreg", "sys", "builtins", "traceback", "linecache", "weakref", "dill",
                      "cloudpickle", "operator"),
    "threads": ("threading", "_thread", "concurrent", "multiprocessing", "asyncio", "signal", "sched"),
    "processes": ("os", "posix", "subprocess", "ctypes", "cffi", "importlib", "pkgutil", "runpy",
                  "zipimport", "shutil", "pathlib", "io", "tempfile", "glob", "socket", "pty",
                  "mmap", "select", "fcntl", "resource", "site", "sysconfig", "urllib", "http"),
    "hand-in": ("tfmlib.handin",),
}
ESCAPE_BUILTINS = {
    "introspection": ("eval", "exec", "compile", "globals", "locals", "vars", "breakpoint",
                      "__import__", "__build_class__", "memoryview", "get_ipython", "setattr",
                      "delattr"),
    "processes": ("open", "input", "exit", "quit", "help"),
}
ESCAPE_ATTRIBUTES = {
    "threads": ("setprofile", "settrace", "setswitchinterval", "Thread", "start_new_thread", "fork",
                "threading", "multiprocessing", "concurrent", "asyncio", "sched"),
    "introspection": ("f_back", "f_globals", "f_locals", "f_builtins", "f_code", "gi_frame",
                      "cr_frame", "tb_frame", "modules", "run_cell", "run_line_magic", "run_cell_magic",
                      # what turns a string into code or into the object it names: typing evaluates a
                      # string annotation, operator's getters and string.Formatter read any attribute,
                      # TorchScript compiles a string, torch.fx calls a method by name, benchmark
                      # timers and numpy.testing.measure run a statement, torch.overrides lists
                      # every function of torch to pick one by its printed name
                      "get_type_hints", "ForwardRef", "attrgetter", "methodcaller", "get_field",
                      "CompilationUnit", "fx", "benchmark", "timeit", "measure", "overrides",
                      "make_dataclass",  # a class whose methods are named by strings
                      # modules re-exported as attributes (typing.operator, typing.types, re.copyreg)
                      "types", "operator", "copyreg", "gc", "weakref", "traceback", "linecache", "dis",
                      "ast", "code", "codeop"),
    "processes": ("system", "popen", "spawn", "getoutput", "environ", "tofile",
                  "load", "save", "hub",  # torch.load and NumPy's unpickle: code from a file
                  # files read without open(): the instructor's notebook, the reference's source
                  "fromfile", "from_file", "loadtxt", "genfromtxt", "fromregex", "memmap", "open_memmap",
                  "read_array", "DataSource", "ctypeslib",
                  "package", "distributed", "f2py",  # torch.package imports pickles; RPC; a compiler
                  "os", "sys", "subprocess", "ctypes", "importlib", "builtins", "inspect", "pickle",
                  "marshal", "posix", "shutil", "socket", "pty", "runpy", "pkgutil", "zipimport",
                  "pathlib", "io", "tempfile", "glob", "mmap", "fcntl", "resource", "site", "sysconfig",
                  "urllib", "http"),  # modules re-exported (torch.os)
    "internals": ("ops", "library", "cpp_extension"),
    "hand-in": ("handin", "graded"),
}
# The names the graded test cells bind, and IPython's history (it holds the cells' text).
ESCAPE_NAMES = {"hand-in": ("_handin", "_exercises", "_result"),
                "introspection": ("In", "Out", "_ih", "_oh", "_dh", "_i", "_ii", "_iii", "exit", "quit")}
# What the notebooks import from tfmlib.exercises (the rest is the checker's machinery).
PUBLIC_EXERCISES = ("check", "solution", "progress", "reset_progress", "exercise_names", "catalogue")
# The few dunder names an answer may define (a class of its own).
PLAIN_DUNDERS = ("__init__", "__call__", "__repr__", "__len__", "__getitem__", "__iter__", "__name__")


@dataclass(frozen=True)
class Finding:
    """One rule an answer or a cell breaks: what it uses, and which rule (a key of WHY)."""
    what: str
    rule: str

    def line(self, where: str) -> str:
        prefix = "uses" if self.rule not in ("copy",) else "is"
        return f"{where} {prefix} {self.what} ({self.rule}): {WHY[self.rule]}"


@dataclass
class RuleSet:
    """What one exercise's answer cell may use (allow-list) and what it may never name."""
    exercise: str
    helpers: frozenset[str]                 # tfmlib names the answer may import
    forbidden: dict[str, str] = field(default_factory=dict)   # name -> rule ("reference", ...)
    references: tuple = ()                  # the reference function(s), for copies


@functools.lru_cache(maxsize=None)
def _tfmlib_names_read(function) -> frozenset[str]:
    """The module-level names of tfmlib that `function`'s body reads (its helpers)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return frozenset(name for name in read if name in function.__globals__
                     and getattr(function.__globals__[name], "__module__", "").startswith("tfmlib")
                     and callable(function.__globals__[name]))


def references_of(name: str) -> tuple:
    reference = REGISTRY[name].reference
    return tuple(inspect.unwrap(r) for r in (reference if isinstance(reference, tuple) else (reference,)))


def rules_for(name: str, teachers: str = "") -> RuleSet:
    """The rule set of exercise `name`; `teachers` is the JSON of the course's FORBIDDEN_CALLS."""
    references = references_of(name)
    forbidden = {r.__name__: "reference" for r in references}
    forbidden["solution"] = "solution"
    for dotted in FORBIDDEN.get(name, ()) + tuple(teachers_calls(teachers).get(name, ())):
        forbidden.setdefault(dotted.rsplit(".", 1)[-1], "built-in")
    helpers = frozenset().union(*(_tfmlib_names_read(r) for r in references)) - set(forbidden)
    return RuleSet(name, helpers, forbidden, references)


# ---- reading a cell ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)  # the lesson's cells recur in every submission; trees are only read
def parse(source: str) -> ast.Module | None:
    """The cell's code as Python (IPython's magics and `!` lines turned into the calls they
    make, as the kernel does); None when it does not parse (it does not run either)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        pass  # IPython's syntax (`!ls`, `%%bash`) is never valid Python: only then transformed
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        return ast.parse(TransformerManager().transform_cell(source))
    except Exception:  # not even IPython's syntax: the kernel cannot run it either
        return None


def _dotted(node) -> str | None:
    """"torch.nn.functional.layer_norm" for that chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _module_rule(module: str) -> str | None:
    """The escape rule a module falls under, or None."""
    parts = module.split(".")
    for rule, modules in ESCAPE_MODULES.items():
        if any(module == m or module.startswith(m + ".") for m in modules):
            return rule
    if parts[0] == "torch" and any(p.startswith("_") or p in ESCAPE_ATTRIBUTES["internals"] for p in parts[1:]):
        return "internals"
    if parts[:2] == ["tfmlib", "exercises"] and len(parts) > 2 and parts[2] not in PUBLIC_EXERCISES:
        return "hand-in"  # the checker's machinery, beyond what the notebooks import from it
    return None


def bound_names(tree: ast.AST) -> set[str]:
    """Every name a cell binds at any depth: assignments, defs, imports, loop and with targets."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def escapes(tree: ast.AST, answer_names: set[str], own_answers: set[str] = frozenset()) -> Finding | None:
    """The first escape route a cell uses (ESCAPES in the module's docstring), or None.
    `answer_names`: the graded answers' names (my_...); `own_answers`: those this cell may bind."""
    bound, aliases = bound_names(tree), _aliases(tree)
    # getattr is only itself when called with the attribute's name written out (getattr(x, "w")):
    # handed on (`g = getattr`) it reads any name
    named = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and len(node.args) >= 2
             and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ("getattr", "hasattr") and id(node) not in named \
                and node.id not in bound:
            return Finding(f"`{node.id}` with a computed name", "introspection")
        found = _escape(node, bound, aliases, answer_names - set(own_answers))
        if found is not None:
            return found
    return None


def _aliases(tree: ast.AST) -> set[str]:
    """The names a cell binds to another object that exists already: imports, `t = torch.nn`,
    `f = some_function` (an attribute set on them would change that object, used elsewhere)."""
    names = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree)
             if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and \
                isinstance(node.value, (ast.Name, ast.Attribute, ast.Subscript)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
    return names


def _escape(node, bound: set[str], aliases: set[str], others: set[str]) -> Finding | None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            rule = _module_rule(alias.name)
            if rule:
                return Finding(f"`import {alias.name}`", rule)
    elif isinstance(node, ast.ImportFrom):
        module = node.module or ""
        rule = _module_rule(module)
        if rule or node.level:
            return Finding(f"`from {'.' * node.level}{module} import ...`", rule or "processes")
        for alias in node.names:
            if alias.name == "*":
                return Finding(f"`from {module} import *`", "introspection")
            rule = _module_rule(f"{module}.{alias.name}") or _name_rule(alias.name)
            if rule:
                return Finding(f"`{alias.name}` from `{module}`", rule)
    elif isinstance(node, ast.Name):
        rule = _name_rule(node.id)
        if rule and not (node.id in bound and not node.id.startswith("__")):  # a variable `input` is no builtin
            return Finding(f"`{node.id}`", rule)
        if node.id in others and not isinstance(node.ctx, ast.Load):
            return Finding(f"`{node.id} = ...`, an answer's name outside its own cell", "changes")
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        if node.name in others:
            return Finding(f"`def {node.name}`, an answer's name outside its own cell", "changes")
        if node.name.startswith("__") and node.name not in PLAIN_DUNDERS:
            return Finding(f"`def {node.name}`", "introspection")
    elif isinstance(node, ast.alias) and (node.asname or "").split(".")[0] in others:
        return Finding(f"`import ... as {node.asname}`, an answer's name outside its own cell", "changes")
    elif isinstance(node, ast.Attribute):
        rule = _attribute_rule(node.attr)
        if rule:
            return Finding(f"`{_dotted(node) or '.' + node.attr}`", rule)
        if not isinstance(node.ctx, ast.Load):
            root = node
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in bound - aliases):
                return Finding(f"`{_dotted(node) or '....' + node.attr} = ...`", "changes")
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        return Finding(f"`{'global' if isinstance(node, ast.Global) else 'nonlocal'} "
                       f"{', '.join(node.names)}`", "changes")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" \
            and len(node.args) + len(node.keywords) > 1 and "type" not in bound:
        return Finding("`type(name, bases, namespace)`", "introspection")  # methods named by strings
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
        name = node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return Finding(f"`{node.func.id}` with a computed name", "introspection")
        rule = _attribute_rule(name.value)
        if rule:
            return Finding(f"`{node.func.id}(..., {name.value!r})`", rule)
    return None


def _name_rule(name: str) -> str | None:
    for table in (ESCAPE_BUILTINS, ESCAPE_NAMES):
        for rule, names in table.items():
            if name in names:
                return rule
    if name.startswith("__") and name.endswith("__") and name not in PLAIN_DUNDERS:
        return "introspection"
    if name.startswith("_i") and name[2:].isdigit() or name.startswith("_") and name[1:].isdigit():
        return "introspection"  # IPython's _i3 (the text of cell 3), _3 (its output)
    return None


def _attribute_rule(attribute: str) -> str | None:
    if attribute.startswith("__") and attribute.endswith("__"):
        return None if attribute in PLAIN_DUNDERS else "introspection"
    if attribute.startswith("_"):
        return "internals"
    if attribute.startswith("native_"):
        return "internals"
    for rule, names in ESCAPE_ATTRIBUTES.items():
        if attribute in names:
            return rule
    return None


# ---- the answer cell -----------------------------------------------------------------------------

def answer_problem(tree: ast.AST, rules: RuleSet, tfmlib_names: set[str]) -> Finding | None:
    """The first rule of `rules` that an answer cell breaks (escape routes aside), or None.
    `tfmlib_names`: what other cells bound to tfmlib's modules and functions."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tfmlib":
                    return Finding(f"`import {alias.name}`", "tfmlib")
                if alias.name.split(".")[0] not in ALLOWED_IMPORTS:
                    return Finding(f"`import {alias.name}`", "imports")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                rule = rules.forbidden.get(alias.name)
                if rule:
                    return Finding(f"`{alias.name}` from `{module}`", rule)
                if module.split(".")[0] == "tfmlib" and alias.name not in rules.helpers \
                        and not _is_constant(module, alias.name):
                    return Finding(f"`{alias.name}` from `{module}`", "tfmlib")
            if module.split(".")[0] not in ALLOWED_IMPORTS + ("tfmlib",):
                return Finding(f"`from {module} import ...`", "imports")
        elif isinstance(node, ast.Attribute) and node.attr in rules.forbidden:
            return Finding(f"`{_dotted(node) or '.' + node.attr}`", rules.forbidden[node.attr])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "getattr", "hasattr") and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in rules.forbidden:
            return Finding(f"`{node.func.id}(..., {node.args[1].value!r})`", rules.forbidden[node.args[1].value])
    for name in _globals_read(tree):
        if name in rules.forbidden:
            return Finding(f"`{name}`", rules.forbidden[name])
        if name in tfmlib_names and name not in rules.helpers:
            return Finding(f"`{name}`, tfmlib's", "tfmlib")
    return None


def _is_constant(module: str, name: str) -> bool:
    """True for a plain value of a tfmlib module (PAD, BOS): no function, class or module."""
    import importlib
    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return not (callable(value) or inspect.ismodule(value))


def _globals_read(tree: ast.AST) -> list[str]:
    """The names a cell reads that are not its functions' own arguments or local variables
    (at the cell's top level every name read is the notebook's), in order."""
    found = []

    def walk(node, local):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            # decorators, default values and annotations are read where the def stands, not in
            # its body (`def f(t, padding_mask=padding_mask)` reads the notebook's padding_mask)
            arguments = node.args
            outside = [*getattr(node, "decorator_list", []), *arguments.defaults,
                       *(d for d in arguments.kw_defaults if d is not None),
                       *(a.annotation for a in ast.walk(arguments) if isinstance(a, ast.arg) and a.annotation),
                       *([node.returns] if getattr(node, "returns", None) else [])]
            for expression in outside:
                walk(expression, local)
            local = local | {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} | {
                n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
            body = node.body if isinstance(node.body, list) else [node.body]
            for statement in body:
                walk(statement, local)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            found.append(node.id)
        for child in ast.iter_child_nodes(node):
            walk(child, local)

    walk(tree, frozenset())
    return found


def tfmlib_bindings(trees) -> set[str]:
    """The names that cells bind to tfmlib's modules and functions (`import tfmlib`, `from tfmlib
    import causal_mask`, `from tfmlib import experiments as lab`); constants (PAD) aside."""
    import importlib
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names
                          if a.name.split(".")[0] == "tfmlib"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tfmlib":
                try:
                    module = importlib.import_module(node.module)
                except ImportError:
                    continue
                names |= {alias.asname or alias.name for alias in node.names
                          if callable(getattr(module, alias.name, None))
                          or inspect.ismodule(getattr(module, alias.name, None))}
    return names


# ---- a copy of the reference -------------------------------------------------------------------

MIN_TOKENS = 60       # a reference shorter than this can be written alike independently
COPY_SHARE = 0.8      # the share of the reference's code found, in order, in a copy


def tokens(function: ast.FunctionDef) -> list[str]:
    """The function's code as a sequence: node kinds, attribute names, constants and operators,
    every variable name the same (renaming one changes nothing), no docstring, no comments, and
    without the reference's calls of tfmlib's private input checks (`_check_..._inputs`)."""
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    out = []

    def visit(node):
        if isinstance(node, ast.expr_context):
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                (_dotted(node.value.func) or "").lstrip("_").startswith(("check_", "require_")):
            return
        out.append(type(node).__name__)
        if isinstance(node, ast.Attribute):
            out.append("." + node.attr)
        elif isinstance(node, ast.Constant):
            out.append(repr(node.value))
        elif isinstance(node, ast.keyword):
            out.append(f"{node.arg}=")
        for child in ast.iter_child_nodes(node):
            visit(child)

    for statement in body:
        visit(statement)
    return out


@functools.lru_cache(maxsize=None)
def _reference_tokens(reference) -> list[str]:
    return tokens(ast.parse(textwrap.dedent(inspect.getsource(reference))).body[0])


def copy_of(function: ast.FunctionDef, reference) -> float | None:
    """The share of the reference's tokens that the answer holds in the same order, when the
    reference is long enough to tell (MIN_TOKENS), else None."""
    theirs = _reference_tokens(reference)
    if len(theirs) < MIN_TOKENS:
        return None
    matcher = difflib.SequenceMatcher(None, tokens(function), theirs, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()) / len(theirs)


# ---- the whole submission ------------------------------------------------------------------------

@dataclass
class Cell:
    """A code cell of the submission: its index, its parsed code, whether the learner changed it
    (its text is not one of the release's), and the exercise it answers (None for other cells)."""
    index: int
    tree: ast.Module
    changed: bool
    answers: str | None = None


def judge_submission(cells: list[Cell], answers: dict[str, list[str]], teachers: str = "") -> dict[str, str]:
    """{exercise: the one-line reason its answer is not the learner's own work} for the exercises
    of `answers` ({exercise: its answer function names}) whose answer breaks a rule; a finding in a
    changed cell that is not an answer costs every exercise that reads what it binds, or, for an
    escape route, every exercise of the notebook."""
    answer_names = {n for names in answers.values() for n in names}
    aliases = tfmlib_bindings(c.tree for c in cells if not c.changed)
    problems: dict[str, str] = {}
    for cell in cells:
        if not cell.changed:
            continue
        own = set(answers.get(cell.answers, ()))
        found = escapes(cell.tree, answer_names, own)
        if found is not None:
            where = f"your answer to {cell.answers}" if cell.answers else f"code cell {cell.index + 1}"
            line = found.line(where)
            for name in ([cell.answers] if cell.answers else answers):
                problems.setdefault(name, line)
    for name, functions in answers.items():
        if name in problems:
            continue
        rules = rules_for(name, teachers)
        for cell in _cells_of_the_answer(cells, name, functions, answer_names, aliases):
            found = answer_problem(cell.tree, rules, aliases)
            if found is not None:
                where = f"your answer to {name}" if cell.answers == name else f"code cell {cell.index + 1}, which it uses,"
                problems[name] = found.line(where)
                break
        else:
            found = _copied(cells, name, functions, rules)
            if found is not None:
                problems[name] = found.line(f"your answer to {name}")
    return problems


def _cells_of_the_answer(cells: list[Cell], name: str, functions: list[str], answer_names: set[str],
                         aliases: set[str]) -> list[Cell]:
    """The answer cell of `name` and any other changed cell that binds its functions (an answer
    cell stripped of its nbgrader marks is still the answer), and every changed cell that binds a
    name they read (the learner's own helpers, data they use), until none is added."""
    chosen = [c for c in cells if c.answers == name or c.changed and c.answers is None
              and set(functions) & bound_names(c.tree)]
    reads = set()
    while True:
        for cell in chosen:
            reads |= {n.id for n in ast.walk(cell.tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        reads -= answer_names | aliases | set(dir(builtins))
        more = [c for c in cells if c.changed and c not in chosen and c.answers is None
                and (bound_names(c.tree) - _allowed_imports(c.tree)) & reads]
        if not more:
            return chosen
        chosen += more


def _allowed_imports(tree: ast.AST) -> set[str]:
    """The names a cell binds by importing an allowed module (`import torch` again changes nothing)."""
    return {(a.asname or a.name).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
            for a in node.names if a.name.split(".")[0] in ALLOWED_IMPORTS}


def _copied(cells: list[Cell], name: str, functions: list[str], rules: RuleSet) -> Finding | None:
    defs = {node.name: node for cell in cells if cell.answers == name for node in ast.walk(cell.tree)
            if isinstance(node, ast.FunctionDef)}
    for function, reference in zip(functions, rules.references):
        node = defs.get(function)
        share = copy_of(node, reference) if node is not None else None
        if share is not None and share >= COPY_SHARE:
            return Finding(f"{share:.0%} of `{reference.__module__}.{reference.__name__}`'s code, "
                           "in its order", "copy")
    return None
