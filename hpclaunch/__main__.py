from hpclaunch.cli import main

raise SystemExit(main())
