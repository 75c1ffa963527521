"""Check hub/values.yaml against the Zero to JupyterHub chart's own schema, before `helm upgrade`.

    make hub-values-check CHART=jupyterhub-4.3.3.tgz

CHART is the chart as `helm pull jupyterhub/jupyterhub --version 4.3.3` saves it (a .tgz), or the
folder `helm pull --untar` makes. Each chart version carries the JSON schema of its values in
values.schema.yaml; helm itself checks it at install time, this checks it before, without a
cluster, and lists every problem at once: a misspelt key (the chart's schema forbids unknown ones),
a value of the wrong type. Exit status 0 when the values are valid, 1 when not, 2 for bad usage.
"""
from __future__ import annotations

import argparse
import sys
import tarfile
from pathlib import Path

import jsonschema
import yaml

SCHEMA = "values.schema.yaml"
PULL = "helm pull jupyterhub/jupyterhub --version 4.3.3"


class NotAChart(ValueError):
    """CHART is not a chart: no values.schema.yaml where a chart has it."""


def chart_schema(chart: Path) -> dict:
    """The values.schema.yaml at the top of the chart (`jupyterhub/values.schema.yaml` in the .tgz)."""
    if chart.is_dir():
        found = sorted(chart.glob(SCHEMA)) or sorted(chart.glob(f"*/{SCHEMA}"))
        if not found:
            raise NotAChart(f"no {SCHEMA} in the folder {chart} (expected the chart's own folder)")
        return yaml.safe_load(found[0].read_text())
    if not tarfile.is_tarfile(chart):
        raise NotAChart(f"CHART={chart} is neither a chart folder nor a chart archive (.tgz): "
                         f"get it with `{PULL}`")
    with tarfile.open(chart) as archive:
        member = next((m for m in archive.getmembers() if m.isfile() and m.name.count("/") == 1
                       and m.name.endswith(f"/{SCHEMA}")), None)
        if member is None:
            raise NotAChart(f"no {SCHEMA} at the top of {chart}")
        return yaml.safe_load(archive.extractfile(member).read())


def problems(values: dict, schema: dict) -> list[str]:
    """One line per place where `values` breaks `schema`: the key's path, and what is wrong."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    found = []
    for error in sorted(validator.iter_errors(values), key=lambda e: [str(p) for p in e.absolute_path]):
        where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
        found.append(f"{where}: {error.message}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("chart", nargs="?", default="", help=f"the chart's .tgz or folder, from `{PULL}`")
    parser.add_argument("values", nargs="?", default=str(Path(__file__).with_name("values.yaml")))
    args = parser.parse_args(argv)
    if not args.chart:
        print(f"error: say which chart to check against: make hub-values-check CHART=<the .tgz or folder "
              f"that `{PULL}` saves>", file=sys.stderr)
        return 2
    chart = Path(args.chart)
    if not chart.exists():
        print(f"error: CHART={chart} does not exist: get it with `{PULL}`", file=sys.stderr)
        return 2
    try:
        schema = chart_schema(chart)
    except NotAChart as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    values = yaml.safe_load(Path(args.values).read_text()) or {}
    found = problems(values, schema)
    for line in found:
        print(f"{args.values}: {line}")
    print(f"{args.values}: {'valid' if not found else f'{len(found)} problem(s)'} for the chart {chart}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
