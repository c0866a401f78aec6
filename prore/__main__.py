from prore.cli import run

run()
