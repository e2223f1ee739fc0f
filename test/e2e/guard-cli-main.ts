import { Command } from 'commander';
import { registerGuardCommand } from '../../client/guard-command';

/** A stand-in for `orchard`: only the guard command, registered the way client/cli.ts will register it. */
const program = new Command('orchard').showHelpAfterError();
registerGuardCommand(program);
void program.parseAsync(process.argv);
