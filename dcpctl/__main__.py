from dcpctl.start import run

run()
