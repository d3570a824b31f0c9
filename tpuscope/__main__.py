from tpuscope.cli import main

main()
