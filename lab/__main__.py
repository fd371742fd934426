from lab.cli.main import main

raise SystemExit(main())
