"""Packaging hook: the metadata is pyproject.toml's. The CloudFormation template lives at the top
of the checkout (infra/stack.yaml, beside its README); a wheel carries a copy in the package,
as orchestrator/data/stack.yaml, so that `orchestrator infra deploy` works when installed
(orchestrator/infra/template.py reads that copy first)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEMPLATE = Path("infra") / "stack.yaml"


class BuildPy(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:  # an editable install reads the checkout's own template
            self.copy_file(str(TEMPLATE), str(Path(self.build_lib) / "orchestrator" / "data" / "stack.yaml"))


setup(cmdclass={"build_py": BuildPy})
