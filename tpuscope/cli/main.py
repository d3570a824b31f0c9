"""The `tpuscope` command: a click group over one module per command family (each a few lines
over the library; nothing heavy is imported until a command runs)."""

from __future__ import annotations

import click

from tpuscope.cli import bench_cmd, import_cmd, query, run_cmd, show


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tpuscope", message="tpuscope %(version)s")
def main() -> None:
    """Profile XLA programs (PyTorch/XLA, TorchTPU, JAX) and name the line to change.

    \b
    Example:
      tpuscope run python train.py --lr 3e-4
      tpuscope show latest
    """


for command in (
    run_cmd.run,
    show.list_runs,
    show.show,
    show.dashboard,
    bench_cmd.bench,
    import_cmd.import_,
    show.trace,
    show.diff,
    query.query,
    query.compact,
):
    main.add_command(command)
main.add_command(
    __import__("tpuscope.cli.sweep_cmd", fromlist=["sweep"]).sweep
)  # tpuscope sweep (the zoo)


if __name__ == "__main__":
    main()
