from replog.cli import main

main()
