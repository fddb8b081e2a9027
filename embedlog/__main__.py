from embedlog.cli import main

raise SystemExit(main())
