from fedlab.cli import main

raise SystemExit(main())
