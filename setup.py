"""Package discovery only (metadata lives in pyproject.toml).

The dashboard's folder `dashboards/` ships under the import name
`tpuscope_dashboards` (so installing tpuscope never shadows someone's own
`dashboards` package); pyproject's `packages.find` cannot rename a folder, so
the package list is computed here, keeping auto-discovery for new subpackages.
"""

from setuptools import find_namespace_packages, setup

DASHBOARDS = ["tpuscope_dashboards"] + [
    f"tpuscope_dashboards.{name}" for name in find_namespace_packages("dashboards", exclude=["assets*"])
]

setup(
    packages=find_namespace_packages(include=["tpuscope", "tpuscope.*"]) + DASHBOARDS,
    package_dir={"tpuscope_dashboards": "dashboards"},
    # py.typed (PEP 561): tpuscope ships its annotations. Package data is listed here, not in
    # pyproject.toml, whose [tool.setuptools.package-data] would replace this whole argument.
    package_data={"tpuscope": ["py.typed"], "tpuscope_dashboards": ["assets/*"]},
)
