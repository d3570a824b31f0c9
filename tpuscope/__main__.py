from tpuscope.cli.main import main

main()
