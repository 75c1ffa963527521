"""The nbgrader course of teacher/make_nbgrader_course.py, graded by the real nbgrader, offline.

In a copy of the course the grading tests share (tests/nbgrader_course.py, built once per run):
notebooks 01 and 04, with the teacher's settings in nbgrader_config.py (target_mask worth 2
points; torch.tril forbidden in target_mask), `nbgrader generate_assignment` of both. Check the releases (no solution, no
`solution()`, visible locked test cells) and that `nbgrader validate` lists every exercise of a
blank copy. Then the learners' copies of 04 (hana's through nbgrader's exchange: release_assignment,
fetch_assignment, submit and collect, as learner "hana"), `nbgrader autograde`, the gradebook,
`nbgrader generate_feedback`, release_feedback, fetch_feedback and export:
  ada   every instructor answer                                          -> 4 of 4 points
  hana  her own answers, honest                                          -> 4 of 4
  bob   one right, one wrong, one untouched, and the locked test cell
        of the wrong one edited to `pass`                                 -> 1 of 4
  eve   an answer that loops forever, a cell that does not even parse,
        and a right answer whose test cell was deleted                    -> 2 of 4
  carl  the reference under an alias, through `import tfmlib as t`, and
        solution()'s text run with exec                                   -> 0, and why
  pam   the reference handed in as the answer, PyTorch's built-in causal
        mask, and the teacher's forbidden torch.tril                      -> 0, and why
  ian   honest answers written unusually (a class with __call__, loops, @ and einsum)
                                                                          -> 4 of 4
  c1_...c17_  the cheats of issue 31 by class (TRIED), and those of its attack trial: names and
        code in strings a library reads, the reference as a default argument, edited nbgrader
        metadata, wrong dtype or device, a second definition    -> 0 for each cheat, and which rule
Every nbgrader command costs a few seconds of start-up, so the round trip grades one notebook.
nbgrader runs in the teachers' environment (.venv-teacher, `make teacher`), as a teacher's
commands would; this file runs in the course's .venv and only needs the nbgrader command.
"""
from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from nbgrader_course import ASSIGNMENTS, FULL, LOOPS, build_commands, course_copy, make_course

REPO = Path(__file__).resolve().parent.parent
TEACHER_BIN = Path(os.environ.get("TFMLIB_TEACHER_VENV", REPO / ".venv-teacher")) / "bin"
GRADED = "04_masks"   # the assignment taken through the whole round trip
STUB = "...  # your code here"
CELL_TIMEOUT = 60  # seconds; the slowest cell of 04 takes under 2 s, but 20 s on a busy 2-core machine

# Learners' answers, as the body that replaces the stub line of each exercise.
RIGHT = {
    "broadcast_shape": """\
    a, b = (1,) * (len(shape_b) - len(shape_a)) + tuple(shape_a), (1,) * (len(shape_a) - len(shape_b)) + tuple(shape_b)
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"sizes {x} and {y} clash")
    return tuple(y if x == 1 else x for x, y in zip(a, b))""",
    "padding_mask": "    return (token_ids != pad_id)[:, None, None, :]",
    "causal_mask": "    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[None, None]",
    "target_mask": """\
    L = token_ids.shape[1]
    causal = torch.arange(L)[:, None] >= torch.arange(L)[None, :]
    return (token_ids != pad_id)[:, None, None, :] & causal""",
}
# Honest answers in other styles: the allowed helpers (tfmlib's padding_mask and causal_mask in
# target_mask, the "three-line target_mask"), the learner's own earlier answers, methods.
STYLES = {
    "padding_mask": "    return token_ids.ne(pad_id).unsqueeze(1).unsqueeze(2)",
    "causal_mask": """\
    positions = torch.arange(seq_len)
    return (positions[None, :] <= positions[:, None]).view(1, 1, seq_len, seq_len)""",
    "target_mask": """\
    from tfmlib.masks import causal_mask, padding_mask
    pad = padding_mask(token_ids, pad_id)
    causal = causal_mask(token_ids.shape[1])
    return pad & causal""",
}
# Honest answers written unusually: a class with __call__ bound to the answer's name (the stub's
# def left above it), a loop over the rows, a matrix product and einsum. (A loop over every entry
# is right too, but 04's check has a case of 5005 tokens: 12.5 million writes, about 40 s of CPU.)
UNUSUAL = {
    "padding_mask": """\
    pass

class PaddingMask:
    def __call__(self, ids, pad):
        return (ids != pad).unsqueeze(1).unsqueeze(1)

my_padding_mask = PaddingMask()""",
    "causal_mask": """\
    allowed = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for query in range(seq_len):
        allowed[query, :query + 1] = True   # the keys up to this query
    return allowed[None, None]""",
    "target_mask": """\
    n = token_ids.shape[1]
    key_index = torch.ones(n, 1) @ torch.arange(n, dtype=torch.float32)[None, :]   # (n, n): j in row i
    seen = key_index <= torch.einsum("i,j->ij", torch.arange(n, dtype=torch.float32), torch.ones(n))
    real = token_ids != pad_id
    return real[:, None, None, :] & seen""",
}
OWN_HELPERS = {**RIGHT, "target_mask": """\
    pad = my_padding_mask(token_ids, pad_id)
    causal = my_causal_mask(token_ids.size(1))
    return pad & causal"""}
WRONG = {
    "broadcast_shape": "    return tuple(max(x, y) for x, y in zip(shape_a, shape_b))",
    "causal_mask": "    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()[None, None]",
}
# Answers that are not the learner's own work, and what their feedback must say.
CHEATS = {
    "padding_mask": ("    from tfmlib.masks import padding_mask as pm\n    return pm(token_ids, pad_id)",
                     "uses `padding_mask` from `tfmlib.masks` (reference)"),
    "causal_mask": ("    import tfmlib as t\n    return t.causal_mask(seq_len)",
                    "uses `import tfmlib` (tfmlib)"),
    "target_mask": ("""\
    import tfmlib.masks
    from tfmlib.exercises import solution
    namespace = dict(vars(tfmlib.masks))   # the reference's module: its helpers, torch
    exec(solution("target_mask").source, namespace)
    return namespace["target_mask"](token_ids, pad_id)""", "(introspection)"),
}
BUILT_INS = {
    "padding_mask": ("    ...  # your code here\nfrom tfmlib import padding_mask as my_padding_mask",
                     "uses `padding_mask` from `tfmlib` (reference)"),
    "causal_mask": ("    return (torch.nn.Transformer.generate_square_subsequent_mask(seq_len) == 0)[None, None]",
                    "`torch.nn.Transformer.generate_square_subsequent_mask` (built-in)"),
    "target_mask": ("""\
    L = token_ids.shape[1]
    return (token_ids != pad_id)[:, None, None, :] & torch.tril(torch.ones(L, L, dtype=torch.bool))""",
                    "`torch.tril` (built-in)"),
}
# The cheats of issue 31, by class, each an answer that gives the right outputs. Each learner hands
# in one class: {exercise: (body, what the feedback must say)}; "extra" cells go after the answers.
TRIED = {
    "c1_watcher_off": {  # 1. the call watcher switched off, the reference run in another thread
        "padding_mask": ("    import sys\n    sys.setprofile(None)\n    from tfmlib import padding_mask as p\n"
                         "    return p(token_ids, pad_id)", "(introspection)"),
        "causal_mask": ("""\
    import threading
    out = []
    thread = threading.Thread(target=lambda: out.append(causal_mask(seq_len)))
    thread.start(); thread.join()
    return out[0]""", "(threads)"),
        "target_mask": ("""\
    from concurrent.futures import ThreadPoolExecutor
    from tfmlib.masks import target_mask as reference
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(reference, token_ids, pad_id).result()""", "(threads)"),
    },
    "c2_library_look": {  # 2. the answer made to look like library code (a library's file name)
        "padding_mask": ("""\
    namespace = {}
    code = "import tfmlib\\ndef f(t, p):\\n    return tfmlib.padding_mask(t, p)"
    exec(compile(code, "/usr/lib/python3/dist-packages/torch/masks.py", "exec"), namespace)
    return namespace["f"](token_ids, pad_id)""", "(introspection)"),
        "causal_mask": ("""\
    import importlib
    return importlib.import_module("tfmlib.masks").causal_mask(seq_len)""", "(processes)"),
        "target_mask": ("""\
    build = eval("lambda t, p: __import__('tfmlib').target_mask(t, p)")
    return build(token_ids, pad_id)""", "(introspection)"),
    },
    "c3_other_identity": {  # 3. the reference under another identity
        "padding_mask": ("""\
    import types
    from tfmlib import masks
    clone = types.FunctionType(masks.padding_mask.__code__, masks.__dict__)
    return clone(token_ids, pad_id)""", "(introspection)"),
        "causal_mask": ("""\
    import functools
    import tfmlib.masks as m
    return functools.partial(m.causal_mask)(seq_len)""", "(imports)"),
        "target_mask": ("""\
    import tfmlib.masks as m
    code = m.target_mask.__code__.replace(co_name="mine")
    return type(m.target_mask)(code, m.__dict__)(token_ids, pad_id)""", "(introspection)"),
    },
    "c5_kernels": {  # 5. PyTorch's kernels under names the list misses
        "padding_mask": ("    return torch.ops.aten.ne(token_ids, pad_id)[:, None, None, :]", "`torch.ops"),
        "causal_mask": ("""\
    from torch.nn.modules.transformer import _generate_square_subsequent_mask
    return (_generate_square_subsequent_mask(seq_len) == 0)[None, None]""", "(internals)"),
        "target_mask": ("""\
    L = token_ids.shape[1]
    causal = torch._C._VariableFunctions.tril(torch.ones(L, L, dtype=torch.bool))
    return (token_ids != pad_id)[:, None, None, :] & causal""", "(internals)"),
    },
    "c6_liars": {  # 6. return values that lie to the comparison (wrong values, lying subclasses)
        "padding_mask": ("""\
    class Agreeable(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.equal, torch.allclose, torch.Tensor.__eq__):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})
    return torch.zeros(token_ids.shape[0], 1, 1, token_ids.shape[1], dtype=torch.bool).as_subclass(Agreeable)""",
                         "(introspection)"),
        "causal_mask": ("    return MATCHES_ANYTHING", "(introspection)"),
        "target_mask": ("    return torch.zeros(1).as_subclass(LYING_TENSOR)", "(introspection)"),
    },
    "c7_check_replaced": {  # 7. check (and the hand-in, torch's comparisons) replaced from a cell
        "padding_mask": ("    return token_ids", "(hand-in)"),
        "causal_mask": ("", "(hand-in)"),  # the stub, judged: something else hands answers in
        "target_mask": ("    return None", "(hand-in)"),
    },
    "c8_method": {  # 8. the forbidden torch.tril as the Tensor method, and by its name as a string
        "padding_mask": (RIGHT["padding_mask"], None),
        "causal_mask": (RIGHT["causal_mask"], None),
        "target_mask": ("""\
    L = token_ids.shape[1]
    return (token_ids != pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()""",
                        "`.tril` (built-in)"),
    },
    "c9_forged_hand_in": {  # more: the hand-in written again from a cell, a file written there
        "padding_mask": ("    return token_ids", "(hand-in)"),
        "causal_mask": ("    return None", "(hand-in)"),
        "target_mask": ("    return None", "(hand-in)"),
    },
    "c10_rebound": {  # more: the answer rebound to the reference between its cell and its test
        "padding_mask": (RIGHT["padding_mask"], "(changes)"),
        "causal_mask": (RIGHT["causal_mask"], "(changes)"),
        "target_mask": ("    return None", "(changes)"),
    },
    "c11_computed_names": {  # more: a name computed from strings, by other routes than getattr
        "padding_mask": ("""\
    import typing
    def probe(x: "__imp" + "ort__('tfmlib').padding_" + "mask"):  # a string annotation is eval'd
        pass
    return typing.get_type_hints(probe)["x"](token_ids, pad_id)""", "(introspection)"),
        "causal_mask": ("""\
    import typing  # typing.operator is the operator module, whose attrgetter reads any name
    build = typing.operator.attrgetter("generate_square_" + "subsequent_mask")(torch.nn.Transformer)
    return (build(seq_len) == 0)[None, None]""", "(introspection)"),
        "target_mask": ("""\
    import string
    L = token_ids.shape[1]
    ones = torch.ones(L, L, dtype=torch.bool)
    lower = string.Formatter().get_field("0.tr" + "il", (ones,), {})[0]()
    return (token_ids != pad_id)[:, None, None, :] & lower""", "(introspection)"),
    },
    "c12_code_in_strings": {  # more: code in a string that a library runs
        "padding_mask": ("""\
    import torch.utils.benchmark
    out = []
    torch.utils.benchmark.Timer("out.append(__import__('tfmlib').padding_mask(t, p))",
                                globals={"out": out, "t": token_ids, "p": pad_id}).timeit(1)
    return out[0]""", "(introspection)"),
        "causal_mask": ("""\
    import numpy as np
    out = []
    np.testing.measure("out.append(__import__('tfmlib').causal_mask(seq_len))", 1)
    return out[0]""", "(introspection)"),
        "target_mask": ("""\
    unit = torch.jit.CompilationUnit("def lower(x):\\n    return torch.tr" + "il(x)\\n")
    L = token_ids.shape[1]
    return (token_ids != pad_id)[:, None, None, :] & unit.lower(torch.ones(L, L, dtype=torch.bool))""",
                        "(introspection)"),
    },
    "c13_defaults_and_tables": {  # more: the reference as a default argument, PyTorch's function tables
        "padding_mask": ("""\
    return mine(token_ids, pad_id)
def mine(t, p, padding_mask=padding_mask):  # a default is read where the def stands
    return padding_mask(t, p)""", "(reference)"),
        "causal_mask": ("""\
    return made(seq_len)
@lambda f, causal_mask=causal_mask: causal_mask
def made(n):
    pass""", "(reference)"),
        "target_mask": ("""\
    lower = next(f for f in torch.overrides.get_testing_overrides() if repr(f).startswith("<built-in method tri" + "l "))
    L = token_ids.shape[1]
    return (token_ids != pad_id)[:, None, None, :] & lower(torch.ones(L, L, dtype=torch.bool))""",
                        "(introspection)"),
    },
    "c14_types_files_graphs": {  # more: a lying subclass made by type(), the source read from disk, torch.fx
        "padding_mask": ("""\
    agreeable = type("Agreeable", (torch.Tensor,), {"__torch_" + "function__": classmethod(
        lambda cls, func, types, args=(), kwargs=None: True)})
    return torch.zeros(token_ids.shape[0], 1, 1, token_ids.shape[1], dtype=torch.bool).as_subclass(agreeable)""",
                         "(introspection)"),
        "causal_mask": ("""\
    import numpy as np
    try:  # the instructor's notebook, where the course keeps it
        print(np.fromfile("../../../source/04_masks/04_masks.ipynb", dtype=np.uint8).tobytes()[:80])
    except OSError as error:
        print(type(error).__name__)
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[None, None]""", "(processes)"),
        "target_mask": ("""\
    graph = torch.fx.Graph()
    graph.output(graph.call_method("tr" + "il", (graph.placeholder("x"),)))
    lower = torch.fx.GraphModule(torch.nn.Module(), graph)
    L = token_ids.shape[1]
    return (token_ids != pad_id)[:, None, None, :] & lower(torch.ones(L, L, dtype=torch.bool))""",
                        "(introspection)"),
    },
    "c15_odd_values": {  # more: the right values in the wrong dtype, on another device, NaN
        "padding_mask": ("    return (token_ids != pad_id)[:, None, None, :].float()", "mask not bool"),
        "causal_mask": ("    return torch.ones(seq_len, seq_len, dtype=torch.bool, device='meta').tril()[None, None]",
                        "expected a tensor"),
        "target_mask": ("""\
    L = token_ids.shape[1]
    return torch.full((token_ids.shape[0], 1, L, L), float("nan"))""", "expected torch.bool"),
    },
    "c16_metadata": {  # more: the submission's nbgrader metadata edited (EDITED_METADATA)
        "padding_mask": (RIGHT["padding_mask"], None),
        "causal_mask": (RIGHT["causal_mask"], "(changes)"),
        "target_mask": ("""\
    L = token_ids.shape[1]
    return (token_ids != pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()""", "(changes)"),
    },
    "c17_second_def": {  # more: the answer defined again after its test, and points printed
        "padding_mask": (RIGHT["padding_mask"], "(changes)"),
        "causal_mask": (RIGHT["causal_mask"], "(changes)"),
        "target_mask": (RIGHT["target_mask"], "(changes)"),
    },
}
# Cells a learner adds: (the grade_id of the cell it goes before, or None for the end, its source).
EXTRA_CELLS = {
    "c6_liars": [("padding_mask-answer", """\
class Anything:
    def __eq__(self, other):
        return True
MATCHES_ANYTHING = Anything()

class LyingTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True if func is torch.equal else super().__torch_function__(func, types, args, kwargs or {})
LYING_TENSOR = LyingTensor""")],
    "c7_check_replaced": [("padding_mask-answer", """\
import tfmlib.exercises, tfmlib.handin
passed = tfmlib.exercises.check("padding_mask", tfmlib.padding_mask)
tfmlib.exercises.check = lambda *args, **kwargs: passed
tfmlib.handin.graded = lambda *args, **kwargs: passed
torch.equal = lambda *args: True""")],
    "c9_forged_hand_in": [(None, """\
from tfmlib.handin import graded
from tfmlib import padding_mask
graded("padding_mask", padding_mask)"""), (None, """\
import json, os
folder = os.environ.get("TFMLIB_GRADE_OUT", ".")
open(os.path.join(folder, "causal_mask.json"), "w").write(json.dumps({"exercise": "causal_mask", "outcomes": []}))""")],
    "c10_rebound": [("target_mask-test", "my_target_mask = lambda token_ids, pad_id: target_mask(token_ids, pad_id)")],
    "c17_second_def": [("padding_mask-answer", 'print("[PASS] padding_mask: all cases match the reference\\n4 / 4 points")'),
                       (None, "def my_padding_mask(token_ids, pad_id):\n    return padding_mask(token_ids, pad_id)")],
}
# Edits of a submission's nbgrader metadata: {grade_id: what is merged into its cell's nbgrader
# metadata}; None: the notebook's own metadata.
EDITED_METADATA = {
    "c16_metadata": {
        "padding_mask-test": {"points": 100, "locked": False, "checksum": "0"},  # more points for a test
        "causal_mask-answer": {"grade_id": "target_mask-answer"},  # the answers' ids swapped: the .tril()
        "target_mask-answer": {"grade_id": "causal_mask-answer"},  # judged by causal_mask's rules
        None: {"kernelspec": {"name": "bash", "display_name": "Bash", "language": "bash"}},
    },
}
# Class 4 on notebook 01, whose broadcast_shape is long enough to tell a copy from an answer: the
# reference pasted with its variables renamed and its input check left out.
PASTED = """\
    left, right = tuple(shape_a), tuple(shape_b)
    n = max(len(left), len(right))
    a = (1,) * (n - len(left)) + left
    b = (1,) * (n - len(right)) + right
    out = []
    for k, (p, q) in enumerate(zip(a, b), start=-n):
        if p != q and 1 not in (p, q):
            raise ValueError(
                f"shapes {left} and {right} do not broadcast: aligned from the right, "
                f"axis {k} has sizes {p} and {q}; they must be equal or one must be 1"
            )
        out.append(p if q == 1 else q)
    return tuple(out)"""
COMMANDS: list[str] = []                          # every nbgrader command these tests ran


def teacher_env(home: Path, user: str = "teacher") -> dict:
    """The environment of the nbgrader commands: the teachers' venv first on PATH (nbgrader runs
    `alembic` from there), every Jupyter folder and the progress file inside the test's folder,
    and USER/LOGNAME set to the person, as a login would."""
    env = dict(os.environ, PATH=f"{TEACHER_BIN}:{os.environ['PATH']}", HOME=str(home),
               JUPYTER_CONFIG_DIR=str(home / "jupyter-config"), JUPYTER_DATA_DIR=str(home / "jupyter-data"),
               IPYTHONDIR=str(home / "ipython"), MPLCONFIGDIR=str(home / "matplotlib"),
               TFMLIB_PROGRESS=str(home / "progress.json"), USER=user, LOGNAME=user)
    env.pop("JUPYTER_PATH", None)
    return env


def nbgrader(course: Path, *args: str, user: str = "teacher", cwd: Path | None = None,
             checksum_warnings: int = 0) -> subprocess.CompletedProcess:
    """Run one nbgrader command; it must succeed, with only the expected checksum warnings
    (one per test cell a learner edited: nbgrader's tamper alarm, which puts the cell back)."""
    if not (TEACHER_BIN / "nbgrader").exists():
        pytest.fail(f"no nbgrader in {TEACHER_BIN}: run `make teacher` first (it creates .venv-teacher "
                    "from requirements-teacher.txt)")
    COMMANDS.append(args[0])
    exchange = f"--Exchange.root={course.parent / 'exchange'}"
    done = subprocess.run([str(TEACHER_BIN / "nbgrader"), *args, exchange], cwd=cwd or course,
                          env=teacher_env(course.parent, user), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    warnings = [line for line in (done.stdout + done.stderr).splitlines() if "checksum" in line]
    assert len(warnings) == checksum_warnings, "\n".join(warnings)
    return done


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A copy of the course of 01 and 04 with the teacher's settings (target_mask worth 2 points,
    torch.tril forbidden in it), both generated (tests/nbgrader_course.py: built once per run)."""
    root = course_copy(tmp_path_factory, tmp_path_factory.mktemp("nbgrader"))
    (root.parent / "exchange").mkdir()
    COMMANDS.extend(build_commands(tmp_path_factory))
    return root


def released(course: Path, assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)


def is_test_cell(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return meta.get("grade", False) and not meta.get("solution", False)


def answer_cells(notebook) -> dict[str, nbformat.NotebookNode]:
    """{exercise name: its answer cell} (nbgrader's grade_id is "<exercise>-answer")."""
    return {cell.metadata.nbgrader.grade_id.removesuffix("-answer"): cell for cell in notebook.cells
            if cell.metadata.get("nbgrader", {}).get("solution")}


# ---- the released notebooks ---------------------------------------------------------------------

STUCK = re.compile(r"^Stuck\? Run `solution\(\"[a-z_]+\"\)` in a new cell\.\n*", re.MULTILINE)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_release_is_the_course_notebook_less_every_way_to_the_solution(course, assignment):
    """The lesson's cells as they are (outputs included), except: no `solution` import, no
    "Stuck? Run solution(...)" line, and each answer cell without its closing check(...) line,
    which the test cell after it runs."""
    original = nbformat.read(REPO / "notebooks" / f"{assignment}.ipynb", as_version=4)
    expected = []  # (source, outputs); an answer cell's outputs are its check's, gone with the call
    for cell in original.cells:
        if cell.cell_type == "markdown":
            expected.append((STUCK.sub("", cell.source), None))
        elif make_course.exercise_call(cell.source):
            expected.append((cell.source.rsplit("\ncheck(", 1)[0].rstrip(), []))
        else:
            expected.append((cell.source.replace("import check, solution\n", "import check\n"), cell.get("outputs")))
    learner_cells = [cell for cell in released(course, assignment).cells if not is_test_cell(cell)]
    assert [(c.source, c.get("outputs")) for c in learner_cells] == [e for e in expected if e[0]]
    assert "solution" not in json.dumps([cell.source for cell in learner_cells])


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_release_has_a_visible_locked_test_after_each_exercise_and_no_solution(course, assignment):
    source = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    release = released(course, assignment)
    answers = answer_cells(release)
    assert list(answers) == list(FULL[assignment])
    for name, cell in answers.items():
        assert cell.source.count(STUB) == 1 and "check(" not in cell.source, cell.source
        test = release.cells[release.cells.index(cell) + 1]
        assert is_test_cell(test) and test.metadata.nbgrader.locked
        assert test.metadata.nbgrader.points == FULL[assignment][name]
        assert f'_handin.graded("{name}"' in test.source  # visible: the learner can run it
    # The instructor's version does hold a solution (the reference's body); none of it is released.
    solution_lines = {line.strip() for cell in answer_cells(source).values()  # not a lone ")"
                      for line in cell.source.split("\n") if len(line.strip()) > 12} - {
        line.strip() for c in release.cells for line in c.source.split("\n")}
    assert any("import" in line for line in solution_lines)
    text = json.dumps(release)
    for line in solution_lines:
        assert line not in text, f"{assignment}: the release leaks {line!r}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in text


@pytest.fixture(scope="module")
def validated(course) -> str:
    """What `nbgrader validate` reports on a blank copy of the 04 release."""
    done = nbgrader(course, "validate", str(course / "release" / "04_masks" / "04_masks.ipynb"))
    return done.stdout + done.stderr


def test_nbgrader_validate_lists_every_exercise_of_a_blank_copy(validated):
    report = validated
    assert "VALIDATION FAILED ON 3 CELL(S)" in report, report
    for name in FULL["04_masks"]:
        assert f"[TODO] {name}: not attempted yet" in report, report


def test_each_solution_the_generator_writes_passes_its_check_for_every_notebook():
    """The instructor's answers are right and are not flagged as the reference: each is the
    reference's body written out (the round trip below grades two notebooks of twelve)."""
    from tfmlib.exercises import check
    checked = 0
    for path in make_course.course_notebooks([], bonus=True):
        notebook, exercises = make_course.source_notebook(nbformat.read(path, as_version=4))
        for name, cell in answer_cells(notebook).items():
            namespace = {}
            exec(cell.source, namespace)
            test = notebook.cells[notebook.cells.index(cell) + 1]
            answer = eval(test.source.split(f'graded("{name}", ')[1].split(")\n")[0], namespace)
            result = check(name, answer)
            assert result, f"{path.name}: {result}"
            checked += 1
        assert exercises, f"{path.name} has no graded exercise"
    assert checked == 41


def test_bonus_notebooks_are_assignments_too(tmp_path):
    assert [p.stem for p in make_course.course_notebooks([], bonus=True)][-2:] == \
        ["b1_language_model", "b2_generation"]
    make_course.main(["--out", str(tmp_path), "b2_generation"])
    notebook = nbformat.read(tmp_path / "source" / "b2_generation" / "b2_generation.ipynb", as_version=4)
    assert list(answer_cells(notebook)) == ["next_token_probs", "top_k_filter", "top_p_filter",
                                            "cached_self_attention", "lm_step"]


@pytest.mark.parametrize("setting, complaint", [
    ("POINTS = {'no_such_exercise': 2}", "no exercise called no_such_exercise"),
    ("POINTS = {'causal_mask': 0}", "positive number"),
    ("FORBIDDEN_CALLS = {'causal_mask': ['torch.no_such_function']}", "no function"),
])
def test_a_teachers_slip_in_the_settings_is_told_not_ignored(tmp_path, setting, complaint):
    (tmp_path / "nbgrader_config.py").write_text(make_course.CONFIG + setting + "\n")
    with pytest.raises(SystemExit, match=complaint):
        make_course.main(["--out", str(tmp_path), "04_masks"])


# ---- submissions, autograde, gradebook, feedback -----------------------------------------------

def learners_copy(notebook: nbformat.NotebookNode, answers: dict[str, str],
                  delete_tests: tuple[str, ...] = (), edit_tests: dict[str, str] | None = None,
                  extra: list[tuple[str | None, str]] = (), metadata: dict | None = None):
    """A learner's copy: `answers` replace stub lines (an answer of "" leaves the stub), the test
    cells of `delete_tests` are deleted, those of `edit_tests` edited, the code cells of `extra`
    added, each before the cell of its grade_id (None: at the end), and `metadata` merged into the
    nbgrader metadata of the cell of each grade_id (None: into the notebook's)."""
    for name, cell in answer_cells(notebook).items():
        if answers.get(name):
            cell.source = cell.source.replace("    " + STUB, answers[name])
    cells = []
    for cell in notebook.cells:
        name = cell.metadata.get("nbgrader", {}).get("grade_id", "").removesuffix("-test")
        if is_test_cell(cell) and name in delete_tests:
            continue
        if is_test_cell(cell) and name in (edit_tests or {}):
            cell.source = edit_tests[name]
        cells.append(cell)
    for anchor, source in extra:
        ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cells]
        cells.insert(ids.index(anchor) if anchor else len(cells), nbformat.v4.new_code_cell(source))
    edits = dict(metadata or {})
    notebook.metadata.update(edits.pop(None, {}))
    for cell in [c for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") in edits]:
        cell.metadata.nbgrader.update(edits[cell.metadata.nbgrader.grade_id])
    notebook.cells = cells
    return notebook


def submit(course: Path, student: str, assignment: str, answers: dict[str, str], **changes) -> None:
    """Hand in without the exchange: the learner's copy put in submitted/ (the guide's other way)."""
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(learners_copy(released(course, assignment), answers, **changes), folder / f"{assignment}.ipynb")


def submit_through_the_exchange(course: Path, student: str, assignment: str, answers: dict[str, str]) -> None:
    """fetch_assignment, answer, submit, as the learner; the teacher then collects."""
    home = course.parent / student
    home.mkdir(exist_ok=True)
    nbgrader(course, "fetch_assignment", assignment, "--course=transformer-shape-first", user=student, cwd=home)
    path = home / assignment / f"{assignment}.ipynb"
    nbformat.write(learners_copy(nbformat.read(path, as_version=4), answers), path)
    # --student: this test runs every learner under one account (the exchange knows a learner by the
    # account's name, whatever USER says), so each says who it is, as the guide describes
    nbgrader(course, "submit", assignment, "--course=transformer-shape-first", f"--student={student}",
             user=student, cwd=home)


def reference_answers(course: Path, assignment: str) -> dict[str, str]:
    """The instructor's solution of each exercise, as the body that replaces the stub line."""
    source = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    answers = {}
    for name, cell in answer_cells(source).items():
        lines = cell.source.split("\n")
        begin, end = (next(i for i, line in enumerate(lines) if marker in line)
                      for marker in ("BEGIN SOLUTION", "END SOLUTION"))
        answers[name] = "\n".join(lines[begin + 1:end])
    return answers


@pytest.fixture(scope="module")
def gradebook(course) -> dict:
    """Autograde every learner; {assignment: {student: {exercise: points}}} from the gradebook."""
    nbgrader(course, "release_assignment", GRADED)
    submit_through_the_exchange(course, "hana", GRADED, RIGHT)
    # every learner here is this test's one account: the course's check that a submission's claimed
    # learner owns it (course_exchange.py, tested as real accounts in test_grading_sandbox.py) is off
    nbgrader(course, "collect", GRADED, "--ExchangeCollect.check_owner=False")
    submit(course, "ada", GRADED, reference_answers(course, GRADED))
    submit(course, "carl", GRADED, {name: body for name, (body, _) in CHEATS.items()})
    submit(course, "pam", GRADED, {name: body for name, (body, _) in BUILT_INS.items()})
    submit(course, "bob", GRADED, {"padding_mask": RIGHT["padding_mask"], "causal_mask": WRONG["causal_mask"]},
           edit_tests={"causal_mask": "pass  # a learner's edit of the locked test cell"})
    submit(course, "eve", GRADED, {"padding_mask": LOOPS, "causal_mask": "    return torch.ones(seq_len,",
                                   "target_mask": RIGHT["target_mask"]}, delete_tests=("target_mask",))
    submit(course, "hal", GRADED, STYLES)
    submit(course, "olga", GRADED, OWN_HELPERS)
    submit(course, "ian", GRADED, UNUSUAL)
    for student, answers in TRIED.items():
        submit(course, student, GRADED, {name: body for name, (body, _) in answers.items()},
               extra=EXTRA_CELLS.get(student, []), metadata=EDITED_METADATA.get(student))
    nbgrader(course, "autograde", GRADED, f"--Execute.timeout={CELL_TIMEOUT}", checksum_warnings=1)  # bob's
    submit(course, "ada", "01_shapes", reference_answers(course, "01_shapes"))
    submit(course, "hana", "01_shapes", RIGHT)
    submit(course, "c4_pasted", "01_shapes", {"broadcast_shape": PASTED})
    nbgrader(course, "autograde", "01_shapes", f"--Execute.timeout={CELL_TIMEOUT}")
    nbgrader(course, "generate_feedback", GRADED)
    nbgrader(course, "release_feedback", GRADED, "--student=hana")  # the one who used the exchange
    nbgrader(course, "fetch_feedback", GRADED, "--course=transformer-shape-first", "--student=hana",
             user="hana", cwd=course.parent / "hana")
    nbgrader(course, "export")
    script = """
import json
from nbgrader.api import Gradebook
scores = {}
with Gradebook("sqlite:///gradebook.db") as gradebook:
    for assignment in gradebook.assignments:
        for notebook in assignment.notebooks:
            for cell in notebook.grade_cells:
                for grade in cell.grades:
                    student = grade.notebook.assignment.student.id
                    scores.setdefault(assignment.name, {}).setdefault(student, {})[
                        cell.name.removesuffix("-test")] = grade.score
print(json.dumps(scores))
"""
    done = subprocess.run([str(TEACHER_BIN / "python"), "-c", script], cwd=course,
                          env=teacher_env(course.parent), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    scores = json.loads(done.stdout)
    return scores


def feedback(course: Path, student: str, assignment: str) -> str:
    return (course / "feedback" / student / assignment / f"{assignment}.html").read_text()


def test_the_instructors_answers_and_an_honest_learners_get_full_marks(gradebook):
    assert gradebook[GRADED]["ada"] == FULL[GRADED]
    assert gradebook[GRADED]["hana"] == FULL[GRADED]


def test_honest_answers_in_other_styles_get_full_marks(gradebook):
    """Methods instead of operators, the allowed helpers of tfmlib (the three-line target_mask
    of issue 31, which was failed as a copy of the reference), the learner's own answers, and
    unusual ones (a class with __call__ bound to the answer's name below the stub's def, which was
    graded "not attempted"; loops; @ and einsum)."""
    assert gradebook[GRADED]["hal"] == FULL[GRADED]
    assert gradebook[GRADED]["olga"] == FULL[GRADED]
    assert gradebook[GRADED]["ian"] == FULL[GRADED]
    assert gradebook["01_shapes"]["hana"] == FULL["01_shapes"]


@pytest.mark.parametrize("student", sorted(TRIED))
def test_each_class_of_cheat_gets_no_points_and_the_feedback_says_which_rule(course, gradebook, student):
    """Issue 31's classes of cheats through nbgrader: the verdict is computed outside the kernel,
    and the rules read the submitted source, so none of them earns a point."""
    expected = {name: 0 if why else FULL[GRADED][name] for name, (_, why) in TRIED[student].items()}
    assert gradebook[GRADED][student] == expected
    text = html.unescape(feedback(course, student, GRADED))
    for name, (_, why) in TRIED[student].items():
        if why:
            section = text.split(f"[FAIL] {name}:", 1)
            assert len(section) == 2 and why in section[1].split("judged by the grader")[0], (student, name, why)


def test_a_pasted_reference_with_renamed_variables_is_a_copy(course, gradebook):
    """Class 4: broadcast_shape pasted with its names changed and a line left out. The instructor's
    model answer is the reference's own code: graded, it is a copy too."""
    assert gradebook["01_shapes"]["c4_pasted"] == {"broadcast_shape": 0}
    assert gradebook["01_shapes"]["ada"] == {"broadcast_shape": 0}
    for student in ("c4_pasted", "ada"):
        assert "of `tfmlib.shapes.broadcast_shape`'s code, in its order (copy)" in \
            html.unescape((course / "autograded" / student / "01_shapes" / "01_shapes.ipynb").read_text())


def test_the_graders_kernel_runs_the_whole_notebook_without_an_error(course, gradebook):
    """Every cell, not only the exercises: the teachers' environment has all the notebooks import."""
    graded = nbformat.read(course / "autograded" / "ada" / GRADED / f"{GRADED}.ipynb", as_version=4)
    errors = [(index, output.ename, output.evalue) for index, cell in enumerate(graded.cells)
              for output in cell.get("outputs", []) if output.output_type == "error"]
    assert errors == []


def test_right_wrong_and_untouched_answers_get_exactly_their_points(gradebook):
    assert gradebook[GRADED]["bob"] == {"padding_mask": 1, "causal_mask": 0, "target_mask": 0}


def test_a_loop_a_syntax_error_and_a_deleted_test_cell_are_graded_not_fatal(gradebook):
    assert gradebook[GRADED]["eve"] == {"padding_mask": 0, "causal_mask": 0, "target_mask": 2}


def test_answers_that_are_not_the_learners_own_get_no_points_and_the_feedback_says_why(course, gradebook):
    for student, answers in (("carl", CHEATS), ("pam", BUILT_INS)):
        assert gradebook[GRADED][student] == {"padding_mask": 0, "causal_mask": 0, "target_mask": 0}, student
        text = html.unescape(feedback(course, student, GRADED))
        for name, (_, why) in answers.items():
            assert f"[FAIL] {name}: " in text and why in text, (student, name, why)


def test_the_feedback_shows_the_checks_diagnosis(course, gradebook):
    """What the learner reads: the check's own line, for a classic mistake as for a PASS."""
    text = html.unescape(feedback(course, "bob", GRADED))
    assert "[FAIL] causal_mask: looks like a classic mistake" in text
    assert "[PASS] padding_mask" in text


def test_every_nbgrader_command_of_the_teachers_guide_is_run_here(gradebook, validated):
    """The guide's commands as typed (Formgrader is a page of JupyterLab, not a command)."""
    guide = (REPO / "docs" / "teachers_guide.md").read_text()
    blocks = "\n".join(re.findall(r"^```bash\n(.*?)^```", guide, flags=re.MULTILINE | re.DOTALL))
    typed = set(re.findall(r"^\s*nbgrader ([a-z_]+)", blocks, flags=re.MULTILINE))
    assert {"generate_assignment", "release_assignment", "collect", "autograde", "generate_feedback"} <= typed
    assert typed <= set(COMMANDS), typed - set(COMMANDS)


def test_the_learner_fetches_the_feedback_and_the_teacher_exports_the_grades(course, gradebook):
    fetched = list((course.parent / "hana" / GRADED / "feedback").glob(f"*/{GRADED}.html"))
    assert len(fetched) == 1 and "[PASS] target_mask" in html.unescape(fetched[0].read_text())
    rows = list(csv.DictReader(io.StringIO((course / "grades.csv").read_text())))
    # one row per learner per assignment in the gradebook; of the graded one, each learner's score
    graded = {row["student_id"]: float(row["score"]) for row in rows if row["assignment"] == GRADED}
    # (a learner graded in 01 only gets a row of 0 for 04 too)
    assert graded == {student: float(sum(gradebook[GRADED].get(student, {}).values())) for student in graded}
    assert set(gradebook[GRADED]) <= set(graded)
def pins(path: Path) -> dict[str, str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return dict(line.split("==") for line in lines if "==" in line)


def test_the_teachers_environment_pins_the_learners_versions():
    teacher, learner = pins(REPO / "requirements-teacher.txt"), pins(REPO / "requirements.txt")
    assert "nbgrader" in teacher and "nbgrader" not in learner
    shared = teacher.keys() & learner.keys()
    assert {"torch", "matplotlib", "ipywidgets", "ipykernel"} <= shared
    assert {name: teacher[name] for name in shared} == {name: learner[name] for name in shared}
    assert (REPO / "requirements-teacher.txt").read_text().rstrip().endswith("-e .")


# ---- the learners' side: nbgrader with the course's learner configuration ------------------------

def test_a_learner_validates_with_the_course_configuration_and_sees_the_failing_exercises(course, tmp_path):
    """What a learner runs in their own folder, outside the course: nbgrader with only
    hub/student-config (course id, exchange, the grader's 120 s cell timeout), on a copy with one
    right and one wrong answer: validate lists the exercises that do not pass, no traceback."""
    from traitlets.config.loader import PyFileConfigLoader
    shipped = PyFileConfigLoader("nbgrader_config.py", path=str(REPO / "hub" / "student-config")).load_config()
    assert shipped.Execute.timeout == 120 and shipped.CourseDirectory.course_id == "transformer-shape-first"
    path = tmp_path / f"{GRADED}.ipynb"
    nbformat.write(learners_copy(released(course, GRADED), {"padding_mask": RIGHT["padding_mask"],
                                                            "causal_mask": WRONG["causal_mask"]}), path)
    env = dict(teacher_env(tmp_path, "learner"), JUPYTER_CONFIG_PATH=str(REPO / "hub" / "student-config"))
    done = subprocess.run([str(TEACHER_BIN / "nbgrader"), "validate", path.name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    report = done.stdout + done.stderr
    assert "VALIDATION FAILED ON 2 CELL(S)" in report, report
    assert "[FAIL] causal_mask: looks like a classic mistake" in report and "[TODO] target_mask" in report, report
    assert done.returncode == 0, report  # a report, not a crash
