from dcpctl.cli import run

run()
