from datacheck.cli import console_main

console_main()
